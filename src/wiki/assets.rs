//! The stylesheets and scripts, embedded in the binary so the wiki needs nothing from elsewhere.

/// `(file name, content type, bytes)` of every embedded static file.
pub const STATIC_FILES: &[(&str, &str, &[u8])] = &[
    (
        "site.css",
        "text/css; charset=utf-8",
        include_bytes!("../../static/site.css"),
    ),
    (
        "print.css",
        "text/css; charset=utf-8",
        include_bytes!("../../static/print.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/app.js"),
    ),
    (
        "playground.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/playground.js"),
    ),
    (
        "theme.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../static/theme.js"),
    ),
    (
        "favicon.ico",
        "image/x-icon",
        include_bytes!("../../static/favicon.ico"),
    ),
];

/// The site icon, also answered at the site root (`/favicon.ico`), where browsers ask for it unprompted.
pub const FAVICON: &[u8] = include_bytes!("../../static/favicon.ico");

/// The content type for a content asset by its file extension.
pub fn content_type(path: &str) -> &'static str {
    match path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .as_deref()
    {
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("md") => "text/markdown; charset=utf-8",
        Some("json") => "application/json",
        Some("js") => "text/javascript; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}
