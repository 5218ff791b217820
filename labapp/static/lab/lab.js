// A lab page whose job is running reloads itself once the job ends, to show the checks.
(function () {
  "use strict";
  const state = document.getElementById("job-state");
  if (!state || !["queued", "running"].includes(state.dataset.status)) return;
  document.body.addEventListener("htmx:afterSwap", () => {
    const now = document.getElementById("job-state");
    if (now && !["queued", "running"].includes(now.dataset.status)) location.reload();
  });
})();
