// The Mendpoint console's only script (gateway/serve/console): copy buttons, the route picker's
// path, and a refresh of the page's figures. It runs nothing the server sent as text.
"use strict";

function copyText(id, button) {
  const source = document.getElementById(id);
  if (!source) return;
  const text = source.textContent;
  const label = button.textContent;
  const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = label; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => selectCopy(source, done));
  } else {
    selectCopy(source, done);
  }
}

function selectCopy(source, done) {
  const range = document.createRange();
  range.selectNodeContents(source);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
  try { document.execCommand("copy"); done(); } catch (e) { /* left selected: Ctrl+C */ }
}

function wire(root) {
  root.querySelectorAll("button[data-copy]").forEach((button) => {
    button.addEventListener("click", () => copyText(button.dataset.copy, button));
  });
}

function routePicker() {
  const route = document.getElementById("route");
  const path = document.getElementById("path");
  if (!route || !path) return;
  route.addEventListener("change", () => {
    const prefix = route.selectedOptions[0].dataset.prefix || "/";
    if (!path.value.toLowerCase().startsWith(prefix.toLowerCase())) path.value = prefix;
  });
}

// Pages with figures fetch themselves again and swap in the new <main>, unless the reader is
// selecting text or the tab is hidden.
function refresher() {
  const seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) return;
  setInterval(async () => {
    if (document.hidden || String(window.getSelection())) return;
    try {
      const answer = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      const main = fresh.getElementById("main");
      const open = [...document.querySelectorAll("details")].map((d) => d.open);
      if (main) {
        document.getElementById("main").replaceWith(document.adoptNode(main));
        document.querySelectorAll("details").forEach((d, i) => { if (i < open.length) d.open = open[i]; });
        wire(document.getElementById("main"));
      }
    } catch (e) { /* the gateway is restarting: the next tick tries again */ }
  }, seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => { wire(document); routePicker(); refresher(); });
