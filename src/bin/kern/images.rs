//! `kern pull`, `kern images`, `kern rmi`, `kern prune`: the image store from a terminal.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kern_sandbox::config::show_bytes;
use kern_sandbox::image::digest::Digest;
use kern_sandbox::image::store::Store;
use kern_sandbox::image::{self, Progress, PullPolicy, Source};
use std::collections::HashMap;

/// A bar per layer, bytes against the layer's size, like `podman pull`. Drawn to stderr only
/// when it is a terminal; otherwise one line per layer.
struct Bars {
    multi: MultiProgress,
    bars: HashMap<Digest, ProgressBar>,
    quiet: bool,
    tty: bool,
}

impl Bars {
    fn new(quiet: bool) -> Bars {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let target = if quiet || !tty {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        Bars {
            multi: MultiProgress::with_draw_target(target),
            bars: HashMap::new(),
            quiet,
            tty,
        }
    }

    fn line(&self, s: &str) {
        if !self.quiet {
            if self.tty {
                let _ = self.multi.println(s);
            } else {
                eprintln!("{s}");
            }
        }
    }
}

fn short(d: &Digest) -> &str {
    &d.hex()[..12]
}

impl Progress for Bars {
    fn layer_start(&mut self, digest: &Digest, size: u64, cached: bool) {
        if cached {
            self.line(&format!("{}: already in the store", short(digest)));
            return;
        }
        let bar = self.multi.add(ProgressBar::new(size));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(short(digest).to_string());
        self.bars.insert(digest.clone(), bar);
    }

    fn layer_bytes(&mut self, digest: &Digest, done: u64) {
        if let Some(b) = self.bars.get(digest) {
            b.set_position(done);
        }
    }

    fn layer_done(&mut self, digest: &Digest) {
        if let Some(b) = self.bars.remove(digest) {
            b.finish();
            if !self.tty {
                self.line(&format!(
                    "{}: downloaded {} bytes",
                    short(digest),
                    b.position()
                ));
            }
        }
    }

    fn message(&mut self, msg: &str) {
        self.line(msg);
    }
}

pub fn pull(what: &str, quiet: bool) -> Result<(), String> {
    let source = Source::parse(what).map_err(|e| e.to_string())?;
    // `kern pull` is how a cached tag is refreshed: always ask the registry.
    let mut bars = Bars::new(quiet);
    let img = image::open(&source, PullPolicy::Always, &mut bars).map_err(|e| e.to_string())?;
    match img.digest {
        Some(d) => println!("{d}"),
        None => println!("{what}: nothing to pull (a directory or \"host\" is used in place)"),
    }
    Ok(())
}

pub fn list() -> Result<(), String> {
    let store = Store::open().map_err(|e| e.to_string())?;
    let images = store.images().map_err(|e| e.to_string())?;
    let now = image::store::now();
    println!(
        "{:<50} {:<14} {:>10}  CREATED",
        "REFERENCE", "DIGEST", "SIZE"
    );
    for m in images {
        let age = now.saturating_sub(m.created);
        let created = match age {
            0..=119 => format!("{age} seconds ago"),
            120..=7199 => format!("{} minutes ago", age / 60),
            7200..=172_799 => format!("{} hours ago", age / 3600),
            _ => format!("{} days ago", age / 86400),
        };
        let refs = if m.references.is_empty() {
            vec!["<none>".to_string()]
        } else {
            m.references.clone()
        };
        for r in refs {
            println!(
                "{:<50} {:<14} {:>10}  {created}",
                r,
                &m.digest[7..19],
                show_bytes(m.size)
            );
        }
    }
    Ok(())
}

pub fn rmi(what: &[String]) -> Result<(), String> {
    let store = Store::open().map_err(|e| e.to_string())?;
    let mut failed = Vec::new();
    for w in what {
        let found = store.find(w).map_err(|e| e.to_string())?;
        let Some(meta) = found else {
            failed.push(format!(
                "{w}: no such image in the store (`kern images` lists them)"
            ));
            continue;
        };
        let d = Digest::parse(&meta.digest).map_err(|e| e.to_string())?;
        if store.remove_image(&d).map_err(|e| e.to_string())? {
            println!("removed {d}");
        } else {
            failed.push(format!(
                "{w}: image {} is in use by an open sandbox; close it first",
                &d.hex()[..12]
            ));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("\n"))
    }
}

pub fn prune() -> Result<(), String> {
    let store = Store::open().map_err(|e| e.to_string())?;
    let (files, bytes) = store.prune().map_err(|e| e.to_string())?;
    println!(
        "removed {files} unused blobs and leftovers, {} freed",
        show_bytes(bytes)
    );
    Ok(())
}
