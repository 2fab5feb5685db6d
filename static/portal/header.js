// Every page of a viewer or above: the header's open-alert badge follows /ws/header/ (its
// count on connect, then each change) without a reload. Quiet: the navbar's live indicator
// belongs to the page's own socket.
document.addEventListener("DOMContentLoaded", function () {
  const badge = document.getElementById("alert-badge");
  if (!badge) return;
  function show(count) {
    badge.dataset.count = count;
    const label = document.createElement("span");
    label.className = count ? "badge text-bg-danger" : "text-secondary";
    label.textContent = count ? `${count} alert${count === 1 ? "" : "s"}` : "no alerts";
    badge.replaceChildren(label);
  }
  PortalLive.connect("/ws/header/", function (msg) {
    if (msg.event === "alerts.count") { show(msg.data.open); badge.dataset.live = "1"; }
  }, null, { quiet: true });
});
