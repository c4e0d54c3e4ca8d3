// The inbox keeps itself current: the server pushes the rows' HTML (rendered and escaped
// there) after every change it watches. Nothing else on any page runs script.
"use strict";
(function () {
  const rows = document.getElementById("inbox-rows");
  if (!rows || !window.EventSource) {
    return;
  }
  const source = new EventSource(rows.dataset.stream);
  source.addEventListener("inbox", function (event) {
    rows.innerHTML = event.data;
    document.body.dataset.inboxUpdates = String(Number(document.body.dataset.inboxUpdates || 0) + 1);
  });
})();
