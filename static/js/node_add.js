// Add-node page: show the SSH fields only for SSH nodes; copy the join command.
const form = document.getElementById("node-add");

function sync() {
  const transport = form.querySelector("input[name=transport]:checked")?.value || "agent";
  form.querySelectorAll("[data-ssh-only]").forEach((el) => (el.hidden = transport !== "ssh"));
  form.querySelectorAll("[data-transport-help]").forEach((el) => (el.hidden = el.dataset.transportHelp !== transport));
}

if (form) {
  form.addEventListener("change", sync);
  sync();
}

document.querySelectorAll("[data-copy]").forEach((button) => {
  button.addEventListener("click", async () => {
    const text = document.querySelector(button.dataset.copy).textContent;
    try {
      await navigator.clipboard.writeText(text);
      button.classList.add("status-ok");
    } catch {
      window.getSelection().selectAllChildren(document.querySelector(button.dataset.copy));
    }
  });
});
