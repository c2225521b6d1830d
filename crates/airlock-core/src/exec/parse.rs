//! A shell command split into what it would run (DESIGN §5.1).
//!
//! The command is parsed with the tree-sitter bash grammar into its simple
//! commands, wherever they are: in pipelines and lists, subshells and
//! groups, loops and conditions, command and process substitutions,
//! functions. Wrappers that run another command (`sudo`, `env`, `timeout`,
//! `nice`, `xargs`, `find -exec`, `sh -c CODE` …) are unwrapped so the inner
//! command is decided on its own. Whatever cannot be proved harmless from the
//! text alone is kept as a [`Hazard`], which asks at least: a parse error, a
//! word only known when the command runs in command position, `eval`,
//! `source`, functions, background jobs, variables set for later commands,
//! code given to an interpreter.
//!
//! Everything here reads untrusted text: it never panics, its recursion is
//! bounded ([`MAX_DEPTH`]), and so is what it collects ([`MAX_UNITS`]).

use tree_sitter::{Node, Parser};

/// How deep wrappers and `sh -c` code may nest before the command asks.
pub const MAX_DEPTH: usize = 16;
/// How many simple commands one command may hold before it asks.
pub const MAX_UNITS: usize = 1000;
/// The longest command text that is parsed; a longer one asks.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;

/// One word of a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    /// Known from the text: quotes removed, escapes resolved.
    Lit(String),
    /// Known only when the command runs (an expansion, a substitution, a
    /// glob, a brace or tilde expansion); its source text.
    Dyn(String),
}

impl Word {
    pub fn literal(&self) -> Option<&str> {
        match self {
            Word::Lit(text) => Some(text),
            Word::Dyn(_) => None,
        }
    }

    /// The word as a human reads it.
    pub fn shown(&self) -> &str {
        match self {
            Word::Lit(text) | Word::Dyn(text) => text,
        }
    }
}

/// Why a part of a command cannot be proved harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hazard {
    /// The text does not parse as bash (or is cut short).
    ParseError,
    /// The command is longer than [`MAX_COMMAND_BYTES`].
    TooLong,
    /// More than [`MAX_UNITS`] commands, or nesting past [`MAX_DEPTH`].
    TooComplex,
    /// A word in command position known only when it runs.
    DynamicCommand,
    /// `eval`, `source`, `.`: runs text as code.
    Eval(String),
    /// `exec`: replaces the shell.
    Exec,
    /// A function definition: later words may name it.
    Function(String),
    /// `alias`, `trap`, `enable` …: changes what later words mean or run.
    ShellState(String),
    /// A job put in the background with `&`.
    Background,
    /// A variable set for this or later commands (`X=1 cmd`, `export X`,
    /// `env X=1 cmd`): it may change what a program does (`PATH`,
    /// `LD_PRELOAD`, `GIT_SSH_COMMAND` …).
    Assignment(String),
    /// An interpreter given code in another language (`python -c`,
    /// `node -e` …).
    InterpreterCode(String),
    /// An interpreter reading its code from standard input, a heredoc or a
    /// here-string (`curl … | sh`, `python <<EOF`).
    InterpreterInput(String),
    /// `sh -c` with code known only when it runs.
    DynamicCode(String),
    /// A wrapper option this parser does not know (so the inner command is
    /// not known either).
    UnknownOption { wrapper: String, option: String },
    /// A privilege-raising wrapper (`sudo`, `doas`).
    Elevated(String),
    /// `find` with an action that writes or deletes (`-delete`, `-fprint` …).
    FindWrites(String),
    /// A redirection whose target is known only when it runs.
    DynamicRedirect(String),
    /// A relative redirection target after `cd`, `pushd` or `popd`: where it
    /// lands is not known from the text.
    RedirectAfterCd(String),
}

impl std::fmt::Display for Hazard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hazard::ParseError => f.write_str("does not parse as bash"),
            Hazard::TooLong => write!(f, "longer than {MAX_COMMAND_BYTES} bytes"),
            Hazard::TooComplex => write!(
                f,
                "more than {MAX_UNITS} commands or nested deeper than {MAX_DEPTH}"
            ),
            Hazard::DynamicCommand => f.write_str("the command name is known only when it runs"),
            Hazard::Eval(name) => write!(f, "`{name}` runs text as code"),
            Hazard::Exec => f.write_str("`exec` replaces the shell"),
            Hazard::Function(name) => write!(f, "defines the function `{name}`"),
            Hazard::ShellState(name) => {
                write!(f, "`{name}` changes what later commands mean")
            }
            Hazard::Background => f.write_str("runs a job in the background"),
            Hazard::Assignment(name) => {
                write!(f, "sets the variable `{name}`, which may change what runs")
            }
            Hazard::InterpreterCode(name) => write!(f, "gives `{name}` code to run"),
            Hazard::InterpreterInput(name) => {
                write!(f, "`{name}` runs code read from its input")
            }
            Hazard::DynamicCode(name) => {
                write!(f, "`{name}` runs code known only when it runs")
            }
            Hazard::UnknownOption { wrapper, option } => {
                write!(f, "`{wrapper}` option `{option}` is not understood")
            }
            Hazard::Elevated(name) => write!(f, "`{name}` raises privileges"),
            Hazard::FindWrites(action) => write!(f, "`find {action}` changes files"),
            Hazard::DynamicRedirect(target) => {
                write!(f, "redirects to `{target}`, known only when it runs")
            }
            Hazard::RedirectAfterCd(target) => {
                write!(f, "redirects to `{target}` after changing directory")
            }
        }
    }
}

/// One thing a command would run, or a reason it cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Its source text (of the innermost code it came from).
    pub text: String,
    /// The wrappers and code it sits in, outermost first (`bash -c`,
    /// `xargs`, `$(…)` …).
    pub via: Vec<String>,
    pub kind: UnitKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitKind {
    /// A simple command, wrappers removed: name and arguments.
    Command(Vec<Word>),
    Hazard(Hazard),
}

/// A redirection to or from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub target: String,
    /// `>`, `>>`, `&>`, `>|`, `<>`: the target is written.
    pub write: bool,
}

/// A command split into what it would run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub units: Vec<Unit>,
    /// Literal redirection targets, as written (relative to the command's
    /// working directory).
    pub redirects: Vec<Redirect>,
}

impl Script {
    /// Whether any unit is a hazard.
    pub fn has_hazard(&self) -> bool {
        self.units
            .iter()
            .any(|unit| matches!(unit.kind, UnitKind::Hazard(_)))
    }
}

/// Splits `command` (bash source) into what it would run.
pub fn parse(command: &str) -> Script {
    let mut walker = Walker {
        script: Script::default(),
        changes_dir: false,
        relative_redirects: Vec::new(),
        overflow: false,
    };
    walker.code(command, &[], 0);
    if walker.changes_dir {
        for (target, via) in std::mem::take(&mut walker.relative_redirects) {
            walker.hazard(&target, &via, Hazard::RedirectAfterCd(target.clone()));
        }
    }
    walker.script
}

/// Splits an argument vector (no shell involved) into what it would run.
pub fn parse_argv(argv: &[String]) -> Script {
    let mut walker = Walker {
        script: Script::default(),
        changes_dir: false,
        relative_redirects: Vec::new(),
        overflow: false,
    };
    let text = shown_argv(argv);
    let words = argv.iter().cloned().map(Word::Lit).collect();
    walker.command(words, &text, &[], 0);
    walker.script
}

/// An argument vector as a shell would read it back.
pub fn shown_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|word| quote(word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` quoted for bash where it needs it.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && !word.starts_with('~')
        && word
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_./=:,+@%^~".contains(&byte));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

struct Walker {
    script: Script,
    changes_dir: bool,
    /// Relative write targets, and where they are, in case of `cd`.
    relative_redirects: Vec<(String, Vec<String>)>,
    overflow: bool,
}

impl Walker {
    fn push(&mut self, unit: Unit) {
        if self.script.units.len() >= MAX_UNITS {
            if !self.overflow {
                self.overflow = true;
                self.script.units.push(Unit {
                    text: String::new(),
                    via: Vec::new(),
                    kind: UnitKind::Hazard(Hazard::TooComplex),
                });
            }
            return;
        }
        self.script.units.push(unit);
    }

    fn hazard(&mut self, text: &str, via: &[String], hazard: Hazard) {
        self.push(Unit {
            text: shorten(text),
            via: via.to_vec(),
            kind: UnitKind::Hazard(hazard),
        });
    }

    /// Bash source `code`, reached through `via`.
    fn code(&mut self, code: &str, via: &[String], depth: usize) {
        if depth > MAX_DEPTH {
            self.hazard(code, via, Hazard::TooComplex);
            return;
        }
        if code.len() > MAX_COMMAND_BYTES {
            self.hazard(code, via, Hazard::TooLong);
            return;
        }
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            self.hazard(code, via, Hazard::ParseError);
            return;
        }
        let Some(tree) = parser.parse(code, None) else {
            self.hazard(code, via, Hazard::ParseError);
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            self.hazard(code, via, Hazard::ParseError);
        }
        let source = Source { code, via, depth };
        self.node(root, &source, 0);
    }

    /// Walks `node`; `nesting` bounds the recursion over the syntax tree.
    fn node(&mut self, node: Node<'_>, source: &Source<'_>, nesting: usize) {
        if nesting > 512 {
            self.hazard(source.text(node), source.via, Hazard::TooComplex);
            return;
        }
        match node.kind() {
            "command" => {
                self.command_node(node, source, nesting);
                return;
            }
            "pipeline" => {
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    self.statement(child, source, nesting);
                }
                return;
            }
            "redirected_statement" => {
                self.statement(node, source, nesting);
                return;
            }
            "function_definition" => {
                let name = node
                    .child_by_field_name("name")
                    .map_or_else(String::new, |name| source.text(name).to_owned());
                self.hazard(source.text(node), source.via, Hazard::Function(name));
            }
            "variable_assignment" => {
                let name = assigned_name(node, source);
                self.hazard(source.text(node), source.via, Hazard::Assignment(name));
            }
            "declaration_command" | "unset_command" => {
                let mut cursor = node.walk();
                let mut names = Vec::new();
                for child in node.named_children(&mut cursor) {
                    match child.kind() {
                        "variable_assignment" => names.push(assigned_name(child, source)),
                        "variable_name" | "word" => names.push(source.text(child).to_owned()),
                        _ => {}
                    }
                }
                let name = if names.is_empty() {
                    source.text(node).to_owned()
                } else {
                    names.join(", ")
                };
                self.hazard(source.text(node), source.via, Hazard::Assignment(name));
                self.substitutions(node, source, nesting);
                return;
            }
            "file_redirect" => self.redirect(node, source),
            "command_substitution" | "process_substitution" => {
                let via = source.with(if node.kind() == "command_substitution" {
                    "$(…)"
                } else {
                    "<(…)"
                });
                let inner = Source {
                    code: source.code,
                    via: &via,
                    depth: source.depth + 1,
                };
                if inner.depth > MAX_DEPTH {
                    self.hazard(source.text(node), source.via, Hazard::TooComplex);
                    return;
                }
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    self.node(child, &inner, nesting + 1);
                }
                return;
            }
            // Reported once for the whole code (`has_error` of its root).
            _ => {}
        }
        // `&` between statements puts the one before it in the background.
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if !child.is_named() {
                if child.kind() == "&" {
                    self.hazard(source.text(node), source.via, Hazard::Background);
                }
                continue;
            }
            self.node(child, source, nesting + 1);
        }
    }

    /// A statement: a command, one with redirections, or anything else.
    fn statement(&mut self, node: Node<'_>, source: &Source<'_>, nesting: usize) {
        match node.kind() {
            "command" => self.command_node(node, source, nesting),
            "redirected_statement" => {
                let mut cursor = node.walk();
                let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
                for child in children {
                    if child.kind() == "command" {
                        self.command_node(child, source, nesting + 1);
                    } else {
                        self.node(child, source, nesting + 1);
                    }
                }
            }
            _ => self.node(node, source, nesting + 1),
        }
    }

    /// A `command` node of the syntax tree.
    fn command_node(&mut self, node: Node<'_>, source: &Source<'_>, nesting: usize) {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            match child.kind() {
                "variable_assignment" => {
                    let name = assigned_name(child, source);
                    self.hazard(source.text(node), source.via, Hazard::Assignment(name));
                    self.substitutions(child, source, nesting);
                }
                "file_redirect" => self.redirect(child, source),
                "herestring_redirect" | "heredoc_redirect" => {
                    self.substitutions(child, source, nesting);
                }
                _ if child.is_missing() => {}
                "command_name" => {
                    if let Some(word) = child.named_child(0).filter(|word| !word.is_missing()) {
                        words.push(word_of(word, source));
                        self.substitutions(word, source, nesting);
                    }
                }
                "comment" => {}
                _ => {
                    words.push(word_of(child, source));
                    self.substitutions(child, source, nesting);
                }
            }
        }
        if words.is_empty() {
            return;
        }
        self.command(words, source.text(node), source.via, source.depth);
    }

    /// The command and process substitutions inside a word.
    fn substitutions(&mut self, node: Node<'_>, source: &Source<'_>, nesting: usize) {
        if matches!(node.kind(), "command_substitution" | "process_substitution") {
            self.node(node, source, nesting + 1);
            return;
        }
        if node.kind() == "file_redirect" {
            self.redirect(node, source);
            return;
        }
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.substitutions(child, source, nesting + 1);
        }
    }

    fn redirect(&mut self, node: Node<'_>, source: &Source<'_>) {
        let mut operator = String::new();
        let mut target = None;
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if child.is_named() {
                if child.kind() != "file_descriptor" {
                    target = Some(child);
                }
            } else {
                operator.push_str(source.text(child));
            }
        }
        let Some(target) = target else {
            return;
        };
        // `>&2`, `2>&1`, `<&0`, `>&-`: descriptors, not files.
        if operator.ends_with('&') && operator != "&>" {
            let text = source.text(target);
            if text == "-" || text.bytes().all(|byte| byte.is_ascii_digit()) {
                return;
            }
        }
        let write = operator.contains('>');
        match word_of(target, source) {
            Word::Lit(path) => {
                if !is_device(&path) && !path.starts_with('/') {
                    self.relative_redirects
                        .push((path.clone(), source.via.to_vec()));
                }
                self.script.redirects.push(Redirect {
                    target: path,
                    write,
                });
            }
            Word::Dyn(text) => {
                self.hazard(source.text(node), source.via, Hazard::DynamicRedirect(text));
            }
        }
        self.substitutions(target, source, 0);
    }

    /// A simple command's words, wrappers removed one by one.
    fn command(&mut self, words: Vec<Word>, text: &str, via: &[String], depth: usize) {
        if depth > MAX_DEPTH {
            self.hazard(text, via, Hazard::TooComplex);
            return;
        }
        let Some(first) = words.first() else {
            return;
        };
        let Some(name) = first.literal() else {
            self.hazard(text, via, Hazard::DynamicCommand);
            return;
        };
        let name = name.to_owned();
        // A path names a program of its own, never a wrapper or builtin.
        let plain = !name.contains('/');
        let unit = |walker: &mut Walker, words: Vec<Word>| {
            walker.push(Unit {
                text: shorten(text),
                via: via.to_vec(),
                kind: UnitKind::Command(words),
            });
        };
        if !plain {
            unit(self, words);
            return;
        }
        let rest = &words[1..];
        let inner_via = |label: &str| {
            let mut via = via.to_vec();
            via.push(label.to_owned());
            via
        };
        match name.as_str() {
            "eval" | "source" | "." => {
                self.hazard(text, via, Hazard::Eval(name.clone()));
                unit(self, words);
            }
            "exec" => {
                self.hazard(text, via, Hazard::Exec);
                if rest.is_empty() {
                    return;
                }
                let inner = skip_options(rest, &["-a"], &["-c", "-l"]);
                self.wrapped(inner, &name, text, &inner_via("exec"), depth);
            }
            "alias" | "unalias" | "trap" | "enable" | "shopt" | "hash" | "bind" | "complete" => {
                self.hazard(text, via, Hazard::ShellState(name.clone()));
                unit(self, words);
            }
            "cd" | "pushd" | "popd" => {
                self.changes_dir = true;
                unit(self, words);
            }
            "sudo" | "doas" => {
                self.hazard(text, via, Hazard::Elevated(name.clone()));
                let inner = skip_options(
                    rest,
                    &[
                        "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user",
                        "--group",
                    ],
                    &[
                        "-E",
                        "-H",
                        "-n",
                        "-S",
                        "-k",
                        "-K",
                        "-P",
                        "-A",
                        "--preserve-env",
                        "--non-interactive",
                    ],
                );
                match inner {
                    Ok([]) => unit(self, words),
                    other => self.wrapped(other, &name, text, &inner_via(&name), depth),
                }
            }
            "env" => {
                let mut index = 0;
                while let Some(word) = rest.get(index) {
                    let Some(literal) = word.literal() else {
                        break;
                    };
                    if literal == "--" {
                        index += 1;
                        break;
                    }
                    if matches!(literal, "-u" | "--unset" | "-C" | "--chdir") {
                        index += 2;
                        continue;
                    }
                    if matches!(
                        literal,
                        "-i" | "--ignore-environment" | "-0" | "--null" | "-v"
                    ) || literal.starts_with("--unset=")
                        || literal.starts_with("--chdir=")
                    {
                        index += 1;
                        continue;
                    }
                    if literal.starts_with('-') {
                        // `-S` splits a string into words: unknown code.
                        self.hazard(
                            text,
                            via,
                            Hazard::UnknownOption {
                                wrapper: name.clone(),
                                option: literal.to_owned(),
                            },
                        );
                        return;
                    }
                    if let Some((variable, _)) = literal.split_once('=') {
                        self.hazard(text, via, Hazard::Assignment(variable.to_owned()));
                        index += 1;
                        continue;
                    }
                    break;
                }
                // Assignments known only when it runs are assignments too.
                match rest.get(index.min(rest.len())..) {
                    Some([]) | None => unit(self, words),
                    Some(inner) => {
                        self.command(inner.to_vec(), text, &inner_via("env"), depth + 1);
                    }
                }
            }
            "timeout" => {
                let inner = skip_options(
                    rest,
                    &["-s", "-k", "--signal", "--kill-after"],
                    &["--preserve-status", "--foreground", "-v", "--verbose"],
                );
                // Then the duration.
                let inner = inner.map(|inner| inner.get(1..).unwrap_or(&[]));
                self.wrapped(inner, &name, text, &inner_via("timeout"), depth);
            }
            "nice" => {
                // `nice -5 cmd`, the old form.
                let old_form = rest.first().and_then(Word::literal).is_some_and(|first| {
                    first.len() > 1 && first.starts_with('-') && first[1..].parse::<u32>().is_ok()
                });
                let rest = if old_form { &rest[1..] } else { rest };
                let inner = skip_options(rest, &["-n", "--adjustment"], &[]);
                match inner {
                    Ok([]) => unit(self, words),
                    other => self.wrapped(other, &name, text, &inner_via("nice"), depth),
                }
            }
            "nohup" | "builtin" => {
                let inner = skip_options(rest, &[], &[]);
                self.wrapped(inner, &name, text, &inner_via(&name), depth);
            }
            "time" => {
                let inner = skip_options(
                    rest,
                    &["-f", "-o", "--format", "--output"],
                    &["-p", "-v", "-a", "--portability", "--verbose", "--append"],
                );
                match inner {
                    Ok([]) => unit(self, words),
                    other => self.wrapped(other, &name, text, &inner_via("time"), depth),
                }
            }
            "setsid" => {
                let inner =
                    skip_options(rest, &[], &["-c", "-f", "-w", "--ctty", "--fork", "--wait"]);
                self.wrapped(inner, &name, text, &inner_via("setsid"), depth);
            }
            "stdbuf" => {
                let inner = skip_options(
                    rest,
                    &["-i", "-o", "-e", "--input", "--output", "--error"],
                    &[],
                );
                self.wrapped(inner, &name, text, &inner_via("stdbuf"), depth);
            }
            "ionice" => {
                let inner = skip_options(
                    rest,
                    &["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"],
                    &["-t", "--ignore"],
                );
                self.wrapped(inner, &name, text, &inner_via("ionice"), depth);
            }
            "command" => {
                // `command -v NAME` and `-V` only look a name up.
                if rest
                    .first()
                    .and_then(Word::literal)
                    .is_some_and(|option| option == "-v" || option == "-V")
                {
                    unit(self, words);
                    return;
                }
                let inner = skip_options(rest, &[], &["-p"]);
                self.wrapped(inner, &name, text, &inner_via("command"), depth);
            }
            "xargs" => self.xargs(words, text, via, depth),
            "find" => self.find(words, text, via, depth),
            "fd" | "fdfind" => self.fd(words, text, via, depth),
            _ if is_shell(&name) => self.shell(words, text, via, depth),
            _ => {
                if let Some(flags) = interpreter_code_flags(&name) {
                    let gives_code = rest.iter().any(|word| {
                        word.literal().is_some_and(|word| {
                            flags.contains(&word)
                                || flags.iter().any(|flag| {
                                    flag.starts_with("--") && word.starts_with(&format!("{flag}="))
                                })
                        })
                    });
                    if gives_code {
                        self.hazard(text, via, Hazard::InterpreterCode(name.clone()));
                    } else if reads_program_from_stdin(rest) {
                        self.hazard(text, via, Hazard::InterpreterInput(name.clone()));
                    }
                }
                unit(self, words);
            }
        }
    }

    /// The command a wrapper runs, or the option that hid it.
    fn wrapped(
        &mut self,
        inner: Result<&[Word], String>,
        wrapper: &str,
        text: &str,
        via: &[String],
        depth: usize,
    ) {
        match inner {
            Ok([]) => {}
            Ok(inner) => self.command(inner.to_vec(), text, via, depth + 1),
            Err(option) => self.hazard(
                text,
                &via[..via.len().saturating_sub(1)],
                Hazard::UnknownOption {
                    wrapper: wrapper.to_owned(),
                    option,
                },
            ),
        }
    }

    /// `sh`, `bash` …: `-c CODE` is parsed as bash; no script reads stdin.
    fn shell(&mut self, words: Vec<Word>, text: &str, via: &[String], depth: usize) {
        let name = words[0].literal().unwrap_or_default().to_owned();
        let mut index = 1;
        let mut code_flag = false;
        let mut reads_stdin = false;
        while let Some(word) = words.get(index) {
            let Some(literal) = word.literal() else {
                break;
            };
            if literal == "--" || literal == "-" {
                index += 1;
                break;
            }
            if matches!(
                literal,
                "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file"
            ) {
                index += 2;
                continue;
            }
            if literal.starts_with("--") {
                index += 1;
                continue;
            }
            if (literal.starts_with('-') || literal.starts_with('+')) && literal.len() > 1 {
                code_flag |= literal[1..].contains('c');
                reads_stdin |= literal[1..].contains('s');
                index += 1;
                continue;
            }
            break;
        }
        let label = format!("{name} -c");
        if code_flag {
            let mut inner_via = via.to_vec();
            inner_via.push(label.clone());
            match words.get(index) {
                Some(Word::Lit(code)) => self.code(&code.clone(), &inner_via, depth + 1),
                Some(Word::Dyn(_)) => self.hazard(text, via, Hazard::DynamicCode(label)),
                None => self.hazard(text, via, Hazard::ParseError),
            }
            return;
        }
        if reads_stdin || words.get(index).is_none() {
            // No script: the code comes from standard input.
            self.hazard(text, via, Hazard::InterpreterInput(name));
        }
        self.push(Unit {
            text: shorten(text),
            via: via.to_vec(),
            kind: UnitKind::Command(words),
        });
    }

    /// `xargs [options] [command [initial-arguments]]`: the command gets
    /// more arguments from the input.
    fn xargs(&mut self, words: Vec<Word>, text: &str, via: &[String], depth: usize) {
        let inner = skip_options(
            &words[1..],
            &[
                "-a",
                "-d",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--eof",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            &[
                "-0",
                "-r",
                "-t",
                "-p",
                "-x",
                "--null",
                "--no-run-if-empty",
                "--verbose",
                "--interactive",
                "--exit",
                "--open-tty",
                "-o",
            ],
        );
        let mut inner_via = via.to_vec();
        inner_via.push("xargs".to_owned());
        match inner {
            Ok([]) => self.command(
                vec![
                    Word::Lit("echo".to_owned()),
                    Word::Dyn("(input)".to_owned()),
                ],
                text,
                &inner_via,
                depth + 1,
            ),
            Ok(inner) => {
                let mut inner = inner.to_vec();
                inner.push(Word::Dyn("(input)".to_owned()));
                self.command(inner, text, &inner_via, depth + 1);
            }
            Err(option) => self.hazard(
                text,
                via,
                Hazard::UnknownOption {
                    wrapper: "xargs".to_owned(),
                    option,
                },
            ),
        }
    }

    /// `find`: its own unit without the commands it runs, which are units
    /// of their own; actions that write ask.
    fn find(&mut self, words: Vec<Word>, text: &str, via: &[String], depth: usize) {
        let mut own = Vec::new();
        let mut index = 0;
        let mut inner_via = via.to_vec();
        inner_via.push("find -exec".to_owned());
        while let Some(word) = words.get(index) {
            index += 1;
            match word.literal() {
                Some(action @ ("-exec" | "-execdir" | "-ok" | "-okdir")) => {
                    own.push(Word::Lit(action.to_owned()));
                    let start = index;
                    while let Some(word) = words.get(index) {
                        if matches!(word.literal(), Some(";" | "+")) {
                            break;
                        }
                        index += 1;
                    }
                    let inner: Vec<Word> = words[start..index]
                        .iter()
                        .map(|word| match word.literal() {
                            Some(literal) if literal.contains("{}") => {
                                Word::Dyn(literal.to_owned())
                            }
                            _ => word.clone(),
                        })
                        .collect();
                    index += 1;
                    if inner.is_empty() {
                        self.hazard(text, via, Hazard::ParseError);
                    } else {
                        self.command(inner, text, &inner_via, depth + 1);
                    }
                }
                Some(action @ ("-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls")) => {
                    self.hazard(text, via, Hazard::FindWrites(action.to_owned()));
                    own.push(word.clone());
                }
                _ => own.push(word.clone()),
            }
        }
        self.push(Unit {
            text: shorten(text),
            via: via.to_vec(),
            kind: UnitKind::Command(own),
        });
    }

    /// `fd … -x CMD` / `-X CMD`: the rest of the words are a command.
    fn fd(&mut self, words: Vec<Word>, text: &str, via: &[String], depth: usize) {
        let position = words.iter().position(|word| {
            matches!(
                word.literal(),
                Some("-x" | "--exec" | "-X" | "--exec-batch")
            )
        });
        match position {
            None => self.push(Unit {
                text: shorten(text),
                via: via.to_vec(),
                kind: UnitKind::Command(words),
            }),
            Some(position) => {
                let mut inner_via = via.to_vec();
                inner_via.push("fd --exec".to_owned());
                let mut inner = words[position + 1..].to_vec();
                if inner.is_empty() {
                    self.hazard(text, via, Hazard::ParseError);
                } else {
                    inner.push(Word::Dyn("(path)".to_owned()));
                    self.command(inner, text, &inner_via, depth + 1);
                }
                self.push(Unit {
                    text: shorten(text),
                    via: via.to_vec(),
                    kind: UnitKind::Command(words[..=position].to_vec()),
                });
            }
        }
    }
}

/// Where a node's text comes from.
struct Source<'a> {
    code: &'a str,
    via: &'a [String],
    depth: usize,
}

impl Source<'_> {
    fn text(&self, node: Node<'_>) -> &str {
        self.code.get(node.byte_range()).unwrap_or_default()
    }

    fn with(&self, label: &str) -> Vec<String> {
        let mut via = self.via.to_vec();
        via.push(label.to_owned());
        via
    }
}

/// Skips a wrapper's options: `with_value` take the next word (or
/// `--opt=value`, or `-oVALUE` for one-letter options), `flags` take none.
/// The words after them; an option outside both lists is an error (its
/// meaning, and so the inner command, is not known).
fn skip_options<'w>(
    words: &'w [Word],
    with_value: &[&str],
    flags: &[&str],
) -> Result<&'w [Word], String> {
    let mut index = 0;
    while let Some(word) = words.get(index) {
        let Some(literal) = word.literal() else {
            // An option known only when it runs.
            if word.shown().starts_with('-') {
                return Err(word.shown().to_owned());
            }
            break;
        };
        if literal == "--" {
            return Ok(&words[index + 1..]);
        }
        if !literal.starts_with('-') || literal == "-" {
            break;
        }
        if flags.contains(&literal) {
            index += 1;
            continue;
        }
        if with_value.contains(&literal) {
            index += 2;
            continue;
        }
        let attached = with_value.iter().any(|option| {
            (option.starts_with("--") && literal.starts_with(&format!("{option}=")))
                || (option.len() == 2 && !option.starts_with("--") && literal.starts_with(option))
        });
        if attached {
            index += 1;
            continue;
        }
        return Err(literal.to_owned());
    }
    Ok(words.get(index..).unwrap_or(&[]))
}

fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "rbash"
    )
}

/// The flags that give an interpreter its code on the command line; `None`
/// for a program that is no interpreter.
fn interpreter_code_flags(name: &str) -> Option<&'static [&'static str]> {
    let python = name == "python"
        || name == "pypy"
        || name == "pypy3"
        || name.strip_prefix("python").is_some_and(|version| {
            !version.is_empty()
                && version
                    .bytes()
                    .all(|byte| byte.is_ascii_digit() || byte == b'.')
        });
    if python {
        return Some(&["-c"]);
    }
    Some(match name {
        "node" | "nodejs" | "bun" => &["-e", "--eval", "-p", "--print"],
        "deno" => &["eval"],
        "perl" | "ruby" => &["-e", "-E"],
        "php" => &["-r"],
        "lua" | "luajit" | "Rscript" => &["-e"],
        "pwsh" | "powershell" => &["-c", "-Command", "-command", "-EncodedCommand"],
        "tclsh" | "wish" | "fish" | "csh" | "tcsh" | "osascript" => &["-c", "-e"],
        "awk" | "gawk" | "mawk" | "nawk" => &[],
        _ => return None,
    })
}

/// Whether an interpreter's arguments name no script, so it reads its
/// program from standard input.
fn reads_program_from_stdin(arguments: &[Word]) -> bool {
    arguments
        .iter()
        .all(|word| word.literal().is_some_and(|word| word.starts_with('-')))
}

fn assigned_name(node: Node<'_>, source: &Source<'_>) -> String {
    node.child_by_field_name("name")
        .or_else(|| node.named_child(0))
        .map_or_else(String::new, |name| source.text(name).to_owned())
}

/// Paths a redirection may name that are no files of the workspace.
pub fn is_device(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/stdin" | "/dev/tty"
    ) || path.starts_with("/dev/fd/")
}

/// The word a syntax node stands for.
fn word_of(node: Node<'_>, source: &Source<'_>) -> Word {
    let text = source.text(node);
    match literal_of(node, source) {
        Some(literal) => Word::Lit(literal),
        None => Word::Dyn(text.to_owned()),
    }
}

fn literal_of(node: Node<'_>, source: &Source<'_>) -> Option<String> {
    let text = source.text(node);
    match node.kind() {
        "word" => unescape_word(text),
        "number" => Some(text.to_owned()),
        "raw_string" => text
            .strip_prefix('\'')
            .and_then(|rest| rest.strip_suffix('\''))
            .map(str::to_owned),
        "string" => {
            let mut out = String::new();
            let mut cursor = node.walk();
            for child in node.named_children(&mut cursor) {
                match child.kind() {
                    "string_content" => out.push_str(&unescape_double(source.text(child))),
                    _ => return None,
                }
            }
            Some(out)
        }
        "concatenation" => {
            let mut out = String::new();
            let mut cursor = node.walk();
            for child in node.children(&mut cursor) {
                out.push_str(&literal_of(child, source)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// An unquoted word: backslashes escape the next character; an unescaped
/// glob, brace or leading tilde makes it known only when it runs.
fn unescape_word(text: &str) -> Option<String> {
    if matches!(text, "[" | "[[" | "]" | "]]" | "{" | "}" | "!") {
        return Some(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(next) => out.push(next),
                None => out.push('\\'),
            },
            '*' | '?' | '[' | '{' | '$' | '`' => return None,
            '~' if first => return None,
            _ => out.push(c),
        }
        first = false;
    }
    Some(out)
}

/// The text between double quotes: `\` escapes only `$`, `` ` ``, `"`, `\`
/// and a newline.
fn unescape_double(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Text shown for a unit: at most 200 characters.
fn shorten(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
