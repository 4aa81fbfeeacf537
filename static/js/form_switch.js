// Forms whose fields depend on one choice: <form data-switch="source"> shows an element marked
// data-show-for="a b" only while the field named "source" is a or b. Hidden fields are disabled too, so
// the form sends only what the chosen source uses.
function currentValue(form, name) {
  const field = form.elements.namedItem(name);
  return (field && field.value) || "";
}

function sync(form) {
  const value = currentValue(form, form.dataset.switch);
  form.querySelectorAll("[data-show-for]").forEach((element) => {
    const shown = element.dataset.showFor.split(" ").includes(value);
    element.hidden = !shown;
    element.querySelectorAll("input, select, textarea").forEach((input) => (input.disabled = !shown));
  });
}

document.querySelectorAll("form[data-switch]").forEach((form) => {
  form.addEventListener("change", (event) => {
    if (event.target.name === form.dataset.switch) sync(form);
  });
  sync(form);
});
