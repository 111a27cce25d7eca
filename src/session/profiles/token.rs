//! A `profiles` entry (`<kind>:<name>`), checked against its one pattern before anything is
//! read: at construction (`check_early`) and at open().

use crate::error::{Error, Result};

/// The longest profile name.
pub const MAX_NAME_LEN: usize = 64;
/// The three kinds of profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Vcpu,
    Vgpio,
    Vdisk,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Vcpu, Kind::Vgpio, Kind::Vdisk];

    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Vcpu => "vcpu",
            Kind::Vgpio => "vgpio",
            Kind::Vdisk => "vdisk",
        }
    }
}

/// One `profiles` entry, checked: `<kind>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub name: String,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.prefix(), self.name)
    }
}

pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Parses one entry against `^(vcpu|vgpio|vdisk):[A-Za-z0-9]{1,64}$`. Nothing else gets
/// through, so an entry can never carry a flag or a path.
pub fn parse_token(s: &str) -> Result<Token> {
    let shown: String = s.chars().take(80).collect();
    let bad = |why: String| {
        Error::Invalid(format!(
            "option `profiles`: {shown:?} {why}; an entry is a kind and a name, such as \
             \"vcpu:heavy\", \"vgpio:leds\" or \"vdisk:scratch\" (the name: 1 to \
             {MAX_NAME_LEN} ASCII letters or digits, as in kern.toml)"
        ))
    };
    let Some((prefix, name)) = s.split_once(':') else {
        return Err(bad("has no kind prefix".into()));
    };
    let Some(kind) = Kind::ALL.into_iter().find(|k| k.prefix() == prefix) else {
        let p: String = prefix.chars().take(20).collect();
        return Err(bad(format!(
            "has the unknown kind {p:?} (known: vcpu, vgpio, vdisk)"
        )));
    };
    if !valid_name(name) {
        return Err(bad("has a name that is not only letters and digits".into()));
    }
    Ok(Token {
        kind,
        name: name.to_string(),
    })
}

/// Every entry parsed; the same entry twice, or two `vcpu` entries, are mistakes.
pub fn check_tokens(entries: &[String]) -> Result<Vec<Token>> {
    let mut out: Vec<Token> = Vec::new();
    for e in entries {
        let t = parse_token(e)?;
        if out.contains(&t) {
            return crate::invalid!("option `profiles` names {t} twice; list each profile once");
        }
        if let Some(first) = out
            .iter()
            .find(|o| o.kind == Kind::Vcpu && t.kind == Kind::Vcpu)
        {
            return crate::invalid!(
                "option `profiles` names two vcpu profiles, {first} and {t}; a box has one CPU and \
                 memory slice, so pick one"
            );
        }
        out.push(t);
    }
    Ok(out)
}
