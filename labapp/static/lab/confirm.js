// A form with data-confirm asks before it is sent (a document's delete button). Listening on
// the document keeps working for rows that htmx swaps in later.
(function () {
  "use strict";
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();
