// One websocket per page: subscribe to groups, reconnect with back-off, tell listeners when it (re)connects
// so they can fetch what they missed over REST.
const listeners = new Map(); // group -> Set(callback)
const reconnectListeners = new Set();
let socket = null;
let backoff = 500;
const SIGNED_OUT = 4401; // CLOSE_SIGNED_OUT in panel/realtime/consumers.py
// A navigation (a link, a form post such as a password change) is under way: the page it loads decides
// what comes next. Reloading now would cancel it, and a password change would then end on the sign-in
// page: the reload still carries the session the change has just replaced.
let leavingSince = 0;
const LEAVING_MS = 15000; // a navigation that never completed (a download, a 204) stops counting after this
addEventListener("beforeunload", () => (leavingSince = Date.now()));
addEventListener("pageshow", () => (leavingSince = 0));

function groups() {
  return [...listeners.keys()];
}

function subscribe() {
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "subscribe", groups: groups() }));
  }
}

function deliver(message) {
  if (message.type === "subscribed") {
    reconnectListeners.forEach((cb) => cb(message));
    return;
  }
  const callbacks = listeners.get(message.group);
  if (callbacks) callbacks.forEach((cb) => cb(message));
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/ws/`);
  socket.addEventListener("open", () => {
    backoff = 500;
    subscribe();
  });
  socket.addEventListener("message", (e) => {
    const data = JSON.parse(e.data);
    // Live metrics come several to a message (one per node that reported since the last one).
    (Array.isArray(data) ? data : [data]).forEach(deliver);
  });
  socket.addEventListener("close", (event) => {
    if (event.code === SIGNED_OUT) {
      // The session ended or the user was deactivated: reloading leads to the sign-in page.
      if (Date.now() - leavingSince > LEAVING_MS) location.reload();
      return;
    }
    setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 10000);
  });
}

export function listen(group, callback) {
  if (!listeners.has(group)) listeners.set(group, new Set());
  listeners.get(group).add(callback);
  if (!socket) connect();
  else subscribe();
}

// Called after every (re)subscription: the moment to back-fill over REST (subscribe, then fetch, then apply).
export function onSubscribed(callback) {
  reconnectListeners.add(callback);
}
