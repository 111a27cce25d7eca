//! `kern volume create|ls|inspect|rm` (the named volumes of `kern_sandbox::volume`, as
//! `Volume.*` has them) and `kern run --volume NAME:PATH[:ro|:shared]`.

use kern_sandbox::config::at_or_under;
use kern_sandbox::config::show_bytes;
use kern_sandbox::engine::shared::spec::BindSpec;
use kern_sandbox::volume::{self, Access, Held};

#[derive(clap::Subcommand)]
pub enum VolumeCommand {
    /// Make an empty volume: kern volume create data --size 1024
    Create {
        name: String,
        /// Cap on what it holds, in MiB (checked before each call that writes it).
        #[arg(long, value_name = "MIB")]
        size: Option<f64>,
        /// Start as a copy of this volume (taken while nobody writes it).
        #[arg(long, value_name = "VOLUME")]
        from: Option<String>,
    },
    /// List this user's volumes.
    Ls {
        /// As a JSON array, as Volume.list() gives it.
        #[arg(long)]
        json: bool,
    },
    /// A volume as JSON: where it is, its cap, what it holds, whether it is mounted now.
    Inspect { name: String },
    /// Remove volumes and what they hold (refused while one is mounted).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

pub fn volume(cmd: VolumeCommand) -> Result<(), String> {
    match cmd {
        VolumeCommand::Create { name, size, from } => {
            let size = size
                .map(volume::check_size)
                .transpose()
                .map_err(|e| e.to_string())?;
            let info = volume::create(&name, size, from.as_deref()).map_err(|e| e.to_string())?;
            println!("{}", info.name);
            Ok(())
        }
        VolumeCommand::Ls { json } => {
            let all = volume::list().map_err(|e| e.to_string())?;
            if json {
                return show(&all);
            }
            println!("{:<32} {:>10} {:>10}  IN USE", "NAME", "SIZE", "USED");
            for v in all {
                println!(
                    "{:<32} {:>10} {:>10}  {}",
                    v.name,
                    v.size_mb
                        .map(|mb| show_bytes(mb << 20))
                        .unwrap_or_else(|| "-".into()),
                    v.used_bytes.map(show_bytes).unwrap_or_else(|| "?".into()),
                    if v.in_use { "yes" } else { "no" }
                );
            }
            Ok(())
        }
        VolumeCommand::Inspect { name } => {
            show(&volume::inspect(&name).map_err(|e| e.to_string())?)
        }
        VolumeCommand::Rm { names } => {
            let mut failed = Vec::new();
            for n in names {
                match volume::remove(&n) {
                    Ok(()) => println!("{n}"),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            match failed.is_empty() {
                true => Ok(()),
                false => Err(failed.join("\nkern: ")),
            }
        }
    }
}

/// Prints an `Info` or a list of them as JSON.
fn show<T: serde::Serialize>(v: &T) -> Result<(), String> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// `--volume NAME:PATH[:ro|:shared]`: each volume held (as a Sandbox holds it) and its bind,
/// for the box `kern run` starts; the holds last as long as the returned `Held`s.
pub fn mounts(
    specs: &[String],
    workspace_target: &str,
) -> Result<(Vec<BindSpec>, Vec<Held>), String> {
    let mut binds: Vec<BindSpec> = Vec::new();
    let mut held = Vec::new();
    for s in specs {
        let bad =
            || format!("--volume {s:?}: expected NAME:PATH, NAME:PATH:ro or NAME:PATH:shared");
        let mut parts = s.splitn(3, ':');
        let (Some(name), Some(path)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let access = match parts.next() {
            None | Some("rw") => Access::Exclusive,
            Some("ro") => Access::ReadOnly,
            Some("shared") => Access::Shared,
            Some(_) => return Err(bad()),
        };
        let what = format!("--volume {name:?}");
        let target = kern_sandbox::session::host_binds::check_target(&what, path, workspace_target)
            .map_err(|e| e.to_string())?;
        if binds
            .iter()
            .any(|b| at_or_under(&target, &b.target) || at_or_under(&b.target, &target))
        {
            return Err(format!(
                "{what}: {target:?} is over, inside or at another --volume; give each its own path"
            ));
        }
        let using = volume::Use {
            volume: volume::resolve(name).map_err(|e| e.to_string())?,
            target,
            access,
        };
        held.push(volume::acquire(&using.volume, access).map_err(|e| e.to_string())?);
        // The Sandbox's check before a call: a volume past its size is not written more.
        if let Err(full) = volume::check_caps(&using.cap().into_iter().collect::<Vec<_>>()) {
            return Err(format!("{what}: {full}"));
        }
        binds.push(using.bind());
    }
    binds.sort_by_key(|b| b.target.matches('/').count());
    Ok((binds, held))
}
