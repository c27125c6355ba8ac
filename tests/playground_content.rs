//! Documentation cannot go stale: every runnable block under `web-wiki/content/` runs on the test device and
//! succeeds.

mod common;

use netcl::Device;
use netcl::script::{Limits, run};
use netcl::wiki::content::Content;
use netcl::wiki::markdown::runnable_blocks;

#[test]
fn every_runnable_block_in_the_content_runs() {
    let device = common::opencl_device().unwrap_or_else(Device::builtin);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web-wiki/content");
    let content = Content::load(&dir).unwrap();
    let mut count = 0;
    for page in content.pages.values() {
        for (i, code) in runnable_blocks(&page.body).iter().enumerate() {
            let r = run(&device, code, &Limits::default());
            assert!(
                r.ok,
                "{}.md, runnable block {}: {:?}\n{code}",
                page.path,
                i + 1,
                r.error
            );
            count += 1;
        }
    }
    assert!(count >= 3, "the docs hold runnable examples ({count})");
}

#[test]
fn runnable_blocks_are_found_by_their_info_string() {
    let md =
        "```netcl\na\n```\n\n```rhai,run\nb\n```\n\n```rhai\nc\n```\n\n```netcl,norun\nd\n```\n";
    assert_eq!(
        runnable_blocks(md),
        vec!["a\n".to_string(), "b\n".to_string()]
    );
}
