//! A workspace in a temporary directory, with the tricks the sandbox must
//! resist already in place.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_fs::{FsError, Sandbox};
use tempfile::TempDir;

/// `<tmp>/root` (the workspace) next to `<tmp>/outside` (what must stay out
/// of reach).
pub struct Fixture {
    _dir: TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
}

pub const OUTSIDE_SECRET: &str = "OUTSIDE SECRET\n";

impl Fixture {
    /// An empty workspace and an outside directory holding `secret.txt`.
    pub fn empty() -> Fixture {
        let dir = TempDir::new().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret.txt"), OUTSIDE_SECRET).unwrap();
        Fixture {
            _dir: dir,
            root,
            outside,
        }
    }

    /// The standard layout: files, protected paths and every kind of link.
    pub fn standard() -> Fixture {
        let fixture = Fixture::empty();
        for (path, content) in [
            ("src/main.rs", "fn main() {}\n"),
            ("src/real.txt", "real\n"),
            ("other/existing.txt", "existing\n"),
            (".env", "SECRET=1\n"),
            (".airlock/audit.jsonl", "{}\n"),
            (".git/config", "[core]\n"),
            ("airlock.yaml", ""),
            ("file.txt", "plain\n"),
            ("données/café.txt", "crème\n"),
            ("secrets/token", "t0k3n\n"),
        ] {
            fixture.write(path, content);
        }
        let root = fixture.root.display().to_string();
        let outside = fixture.outside.display().to_string();
        for (link, target) in [
            ("ok.txt", ".env".to_owned()),
            ("link_out_dir", "../outside".to_owned()),
            ("link_out_file", format!("{outside}/secret.txt")),
            ("link_airlock", ".airlock".to_owned()),
            ("git_link", ".git/config".to_owned()),
            ("config_link", "airlock.yaml".to_owned()),
            ("link_in", "src".to_owned()),
            ("link_abs_in", format!("{root}/src/real.txt")),
            ("link_root_abs", root.clone()),
            ("dangling_out", "../outside/new.txt".to_owned()),
            ("dangling_in", "nowhere.txt".to_owned()),
            ("loop_a", "loop_b".to_owned()),
            ("loop_b", "loop_a".to_owned()),
            ("src/up", "..".to_owned()),
        ] {
            symlink(target, fixture.root.join(link)).unwrap();
        }
        fs::hard_link(
            fixture.outside.join("secret.txt"),
            fixture.root.join("hl.txt"),
        )
        .unwrap();
        fixture
    }

    pub fn write(&self, path: &str, content: &str) {
        let path = self.root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    pub fn read(&self, path: &str) -> String {
        fs::read_to_string(self.root.join(path)).unwrap()
    }

    /// A sandbox over the root with the configuration `yaml`.
    pub fn sandbox(&self, yaml: &str) -> Sandbox {
        sandbox_at(&self.root, yaml)
    }

    /// `{root}` and `{outside}` replaced by the real directories.
    pub fn expand(&self, template: &str) -> String {
        template
            .replace("{root}", &self.root.display().to_string())
            .replace("{outside}", &self.outside.display().to_string())
    }

    /// Every file under `outside`, with its content, sorted.
    pub fn outside_snapshot(&self) -> Vec<(String, String)> {
        let mut files = Vec::new();
        collect(&self.outside, &self.outside, &mut files);
        files.sort();
        files
    }
}

fn collect(base: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let relative = path.strip_prefix(base).unwrap().display().to_string();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files.push((relative.clone() + "/", String::new()));
            collect(base, &path, files);
        } else if kind.is_symlink() {
            let target = fs::read_link(&path).unwrap();
            files.push((relative, format!("-> {}", target.display())));
        } else {
            files.push((relative, fs::read_to_string(&path).unwrap()));
        }
    }
}

/// A sandbox over `root` (canonicalized) with the policy of `yaml`, bound to
/// the root with `airlock.yaml` as its config file.
pub fn sandbox_at(root: &Path, yaml: &str) -> Sandbox {
    let mut loaded = airlock_core::config::load(yaml, "airlock.yaml").unwrap();
    let root = fs::canonicalize(root).unwrap();
    let config_file = root.join("airlock.yaml");
    loaded
        .policy
        .bind_workspace(root.to_str().unwrap(), Some(config_file.to_str().unwrap()));
    Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap()
}

/// `ok` or the error's code, for tables of outcomes.
pub fn code<T>(result: &Result<T, FsError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code().to_string(),
    }
}
