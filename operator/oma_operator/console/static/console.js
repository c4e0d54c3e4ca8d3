// The inbox keeps itself current: the server pushes the rows' HTML (rendered and escaped
// there) after every change it watches. Nothing else on any page runs script.
"use strict";
(function () {
  const rows = document.getElementById("inbox-rows");
  if (!rows || !window.EventSource) {
    return;
  }
  const source = new EventSource(rows.dataset.stream);
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) {
      // The session ended (signed out, idle too long): no more updates; say so.
      document.body.dataset.inboxClosed = "1";
      const note = document.getElementById("inbox-closed");
      if (note) {
        note.hidden = false;
      }
    }
  });
  source.addEventListener("inbox", function (event) {
    rows.innerHTML = event.data;
    document.body.dataset.inboxUpdates = String(Number(document.body.dataset.inboxUpdates || 0) + 1);
  });
})();
