//! The documentation wiki: Markdown content rendered once into pages with navigation, search, highlighted code,
//! math and diagrams, served over HTTP by `netcl serve` or written to static files by `netcl export`.
//!
//! Flow: [`content`] reads the content directory → [`markdown`] renders each page → [`site`] wraps pages in the
//! layout ([`views`]) and builds the [`search`] index → [`server`] answers requests from prepared bytes, or
//! [`export`] writes them to disk.

pub mod assets;
pub mod cli;
pub mod config;
pub mod content;
pub mod engine;
pub mod error;
pub mod export;
pub mod health;
pub mod highlight;
pub mod html;
pub mod links;
pub mod listen;
mod lost;
pub mod markdown;
pub mod math;
pub mod metrics;
pub mod playground;
pub mod prepared;
pub mod query;
mod respond;
pub mod search;
pub mod server;
pub mod site;
mod sse;
pub mod svg;
pub mod views;
pub mod warm;
pub mod watch;

/// Every content problem of the content directory `dir`: unreadable or malformed files, missing front matter
/// fields, pages absent from the manifest or listed without a file, broken internal links, invalid diagrams.
pub fn check(dir: &std::path::Path) -> error::Result<Vec<String>> {
    let content = content::Content::load(dir)?;
    let settings = views::SiteSettings {
        title: "check".into(),
        edit_url: None,
        playground: false,
    };
    Ok(site::build(&content, &settings, &links::LinkMode::Export)?.problems)
}
