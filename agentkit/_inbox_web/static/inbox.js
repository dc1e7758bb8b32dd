// The inbox's only script (the page's Content-Security-Policy allows no other, and no inline one).
// It looks for changes every few seconds and shows the inbox again once another reviewer or a worker
// acted; while a reason or an amendment is being written it only says so, so nothing typed is lost.
"use strict";
(function () {
  const body = document.body;
  const shown = body.dataset.stamp;
  const every = Number(body.dataset.poll) || 2000;
  const changed = document.getElementById("changed");

  function writing() {
    return Array.from(document.querySelectorAll("textarea, input[type=text]")).some(function (field) {
      return field.value !== field.defaultValue || field === document.activeElement;
    });
  }

  async function look() {
    try {
      const response = await fetch("/stamp", { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) {
        return;
      }
      const now = (await response.text()).trim();
      if (now === shown) {
        return;
      }
      if (writing()) {
        changed.hidden = false;
      } else {
        window.location.assign("/");
      }
    } catch (e) {
      // The server is gone or restarting: look again at the next tick.
    }
  }

  window.setInterval(look, every);
  body.dataset.following = "yes";
})();
