//! Reading the layers of `serve`'s configuration: where a value came from ([`Origin`]), the
//! highest layer's value ([`pick`]), and the [`Loader`] that reads the file and each key,
//! collecting every problem with its place.

use super::Layer;
use fencewatch_assess::Duration;
use std::path::Path;

/// Where a value came from, to say so in an error.
#[derive(Clone, Copy, Default)]
pub(super) enum Origin {
    #[default]
    Default,
    File,
    Flag,
}

pub(super) struct Loader {
    pub(super) file: Option<(String, String)>,
    pub(super) errors: Vec<String>,
}

impl Loader {
    pub(super) fn place(&self, key: &str, origin: Origin) -> String {
        match (origin, &self.file) {
            (Origin::File, Some((name, src))) => match line_of_key(src, key) {
                Some(line) => format!("{name}:{line}: `{key}`"),
                None => format!("{name}: `{key}`"),
            },
            (Origin::Flag, _) => format!(
                "--{} (or FENCEWATCH_{})",
                key.replace('_', "-"),
                key.to_ascii_uppercase()
            ),
            _ => format!("default `{key}`"),
        }
    }

    pub(super) fn error(&mut self, key: &str, origin: Origin, message: impl std::fmt::Display) {
        let place = self.place(key, origin);
        self.errors.push(format!("{place}: {message}"));
    }

    /// The duration of the highest layer (zero, with an error, when it is invalid).
    pub(super) fn duration(&mut self, key: &str, v: Option<(String, Origin)>) -> Option<Duration> {
        let (s, origin) = v?;
        match Duration::parse(&s) {
            Ok(d) if d.0 == 0 && key != "future_tolerance" => {
                self.error(key, origin, "must be greater than zero");
            }
            Ok(d) => return Some(d),
            Err(e) => self.error(key, origin, e),
        }
        Some(Duration(0))
    }

    /// The byte count of the highest layer, which must be at least `min`.
    pub(super) fn bytes(&mut self, key: &str, v: Option<(u64, Origin)>, min: u64) -> u64 {
        let (n, origin) = v.unwrap_or((min, Origin::Default));
        if n < min {
            self.error(
                key,
                origin,
                format_args!("{n} is too small (at least {min})"),
            );
        }
        n
    }

    /// A flag or variable that must be a non-negative integer: `None` (with an error) when
    /// it is not, so that every bad one is reported, not only the first.
    pub(super) fn flag_u64(&mut self, key: &str, v: Option<String>) -> Option<u64> {
        let s = v?;
        match s.trim().parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    key,
                    Origin::Flag,
                    format_args!("`{s}` is not a non-negative integer"),
                );
                None
            }
        }
    }

    /// An integer key of at least `min`: the flag or variable (a string, so that a bad one is
    /// reported with the others), else the file, else the default.
    pub(super) fn number(
        &mut self,
        key: &str,
        flag: Option<String>,
        file: Option<u64>,
        default: Option<u64>,
        min: u64,
    ) -> (u64, Origin) {
        let flag = self.flag_u64(key, flag);
        let v = pick(flag, file, default);
        (
            self.bytes(key, v, min),
            v.map_or(Origin::Default, |(_, o)| o),
        )
    }

    /// Reads the file layer; keys with errors are reported and left out.
    pub(super) fn read_file(&mut self, path: &Path) -> Layer {
        let name = path.display().to_string();
        let src = match std::fs::read_to_string(path) {
            Ok(src) => src,
            Err(e) => {
                self.errors
                    .push(format!("config file `{name}`: cannot read: {e}"));
                return Layer::default();
            }
        };
        let mut table: toml::Table = match toml::from_str(&src) {
            Ok(t) => t,
            Err(e) => {
                let line = e.span().map_or(1, |s| line_of_offset(&src, s.start));
                let msg = e.message().trim().to_owned();
                self.errors
                    .push(format!("{name}:{line}: invalid TOML: {msg}"));
                return Layer::default();
            }
        };
        self.file = Some((name.clone(), src.clone()));
        // Each key through the derive on its own: every unknown key and bad type is found.
        let mut bad = Vec::new();
        for (key, value) in &table {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            if let Err(e) = one.try_into::<Layer>() {
                let line = line_of_key(&src, key).unwrap_or(0);
                bad.push((line, key.clone(), e.message().trim().to_owned()));
            }
        }
        bad.sort();
        for (line, key, message) in &bad {
            if message.starts_with("unknown field") {
                self.errors.push(format!("{name}:{line}: {message}"));
            } else {
                self.error(key, Origin::File, message);
            }
        }
        table.retain(|k, _| !bad.iter().any(|(_, b, _)| b == k));
        let mut layer = table.try_into::<Layer>().unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new(""));
        for p in [
            &mut layer.contract,
            &mut layer.data_dir,
            &mut layer.auth_token_file,
        ] {
            if let Some(p) = p.as_mut().filter(|p| p.is_relative()) {
                *p = dir.join(&*p);
            }
        }
        layer
    }
}

fn line_of_offset(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The 1-based line where top-level `key` is assigned, if found.
fn line_of_key(src: &str, key: &str) -> Option<usize> {
    src.lines()
        .position(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix(key)
                .or_else(|| l.strip_prefix(&format!("\"{key}\"")));
            rest.is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// The highest layer's value and its origin.
pub(super) fn pick<T>(flag: Option<T>, file: Option<T>, default: Option<T>) -> Option<(T, Origin)> {
    flag.map(|v| (v, Origin::Flag))
        .or_else(|| file.map(|v| (v, Origin::File)))
        .or_else(|| default.map(|v| (v, Origin::Default)))
}
