// Swagger UI on /api/docs: the bundle is served by the portal (swagger-ui-dist), the
// requests it tries out carry the session's CSRF token like the portal's own pages.
(function () {
  const config = JSON.parse(document.getElementById("swagger-settings").textContent);
  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }
  config.dom_id = "#swagger-ui";
  config.presets = [SwaggerUIBundle.presets.apis];
  config.layout = "BaseLayout";
  config.requestInterceptor = function (req) { req.headers["X-CSRFToken"] = csrfToken(); return req; };
  window.portalSwagger = SwaggerUIBundle(config);
})();
