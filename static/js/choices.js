// Statuses, the colour each shows as, and the sets that end or settle them, as panel/core/domain/choices.py says:
// templates/base.html writes them into every page (json_script "panel-choices"), so no script keeps a copy.
const CHOICES = JSON.parse(document.getElementById("panel-choices")?.textContent || "{}");

// The colour class (ok, warning, alarm, offline, running) of `value` in choice set `set` ("operation",
// "deployment", "node", "npu_health", "step"); a value the set does not name shows as the fallback.
export function colour(set, value) {
  return CHOICES[set]?.colours?.[value] || CHOICES.fallback;
}

export function label(set, value) {
  return CHOICES[set]?.labels?.[value] || value;
}

export const ENDED = new Set(CHOICES.operation?.ended || []); // an operation's terminal statuses
export const SETTLED = new Set(CHOICES.deployment?.settled || []); // states no deployment change is under way in
