//! Deciding a command, simple command by simple command (DESIGN §5.1).

use serde::Serialize;

use super::parse::{self, Script, UnitKind, Word};
use crate::config::{ExecConfig, ExecDecision, ExecRuleConfig, ExecSandbox, ExecToken};
use crate::risk::Risk;

/// Common commands that only read, allowed unless a rule says otherwise.
/// Each entry: the prefix, then options that make it write or run
/// something (then it is not this entry's to allow).
const CURATED: &[(&[&str], &[&str])] = &[
    (&["ls"], &[]),
    (&["cat"], &[]),
    (&["head"], &[]),
    (&["tail"], &[]),
    (&["wc"], &[]),
    (&["pwd"], &[]),
    (&["echo"], &[]),
    (&["printf"], &[]),
    (&["true"], &[]),
    (&["false"], &[]),
    (&["exit"], &[]),
    (&[":"], &[]),
    (&["test"], &[]),
    (&["["], &[]),
    (&["[["], &[]),
    (&["cd"], &[]),
    (&["pushd"], &[]),
    (&["popd"], &[]),
    (&["set"], &[]),
    (&["which"], &[]),
    (&["type"], &[]),
    (&["command", "-v"], &[]),
    (&["command", "-V"], &[]),
    (&["whoami"], &[]),
    (&["id"], &[]),
    (&["uname"], &[]),
    (&["env"], &[]),
    (&["date"], &["-s", "--set"]),
    (&["stat"], &[]),
    (&["file"], &["-C", "--compile"]),
    (&["du"], &[]),
    (&["df"], &[]),
    (&["tree"], &["-o"]),
    (&["basename"], &[]),
    (&["dirname"], &[]),
    (&["realpath"], &[]),
    (&["readlink"], &[]),
    (&["grep"], &[]),
    (&["egrep"], &[]),
    (&["fgrep"], &[]),
    (&["rg"], &["--pre", "--search-zip", "-z"]),
    (&["find"], &[]),
    (&["fd"], &[]),
    (
        &["sort"],
        &[
            "-o",
            "--output",
            "-T",
            "--temporary-directory",
            "--compress-program",
        ],
    ),
    (&["cut"], &[]),
    (&["tr"], &[]),
    (&["nl"], &[]),
    (&["tac"], &[]),
    (&["rev"], &[]),
    (&["diff"], &[]),
    (&["cmp"], &[]),
    (&["comm"], &[]),
    (&["jq"], &[]),
    (&["sha256sum"], &[]),
    (&["md5sum"], &[]),
    (&["git", "status"], &[]),
    (&["git", "diff"], &["--output", "--ext-diff", "--textconv"]),
    (&["git", "log"], &["--output", "--ext-diff", "--textconv"]),
    (&["git", "show"], &["--output", "--ext-diff", "--textconv"]),
    (&["git", "rev-parse"], &[]),
    (&["git", "ls-files"], &[]),
    (&["git", "blame"], &[]),
    (&["cargo", "check"], &[]),
    (&["cargo", "test"], &[]),
    (&["cargo", "build"], &[]),
    (&["cargo", "clippy"], &["--fix"]),
    (&["go", "test"], &[]),
    (&["go", "vet"], &[]),
    (&["go", "build"], &[]),
];

/// Where a rule comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum RuleSource {
    /// `exec.rules[index]`.
    Config { index: usize },
    /// The curated read-only list.
    Curated { prefix: String },
}

impl std::fmt::Display for RuleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleSource::Config { index } => write!(f, "exec.rules[{index}]"),
            RuleSource::Curated { prefix } => write!(f, "the read-only list ({prefix})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Words(Vec<String>),
}

impl Pattern {
    fn accepts(&self, word: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Words(words) => words.iter().any(|candidate| candidate == word),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    prefix: Vec<Pattern>,
    decision: ExecDecision,
    risk: Option<Risk>,
    network: bool,
    /// Options that take a command out of this rule (curated rules).
    reject: &'static [&'static str],
    source: RuleSource,
}

/// How a rule meets a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    No,
    /// Every word it looks at is known and fits.
    Yes,
    /// A word it looks at is known only when the command runs.
    Maybe,
}

impl Rule {
    fn fit(&self, words: &[Word]) -> Fit {
        for (index, pattern) in self.prefix.iter().enumerate() {
            match words.get(index) {
                None => return Fit::No,
                Some(Word::Dyn(_)) => return Fit::Maybe,
                Some(Word::Lit(word)) => {
                    if !pattern.accepts(word) {
                        return Fit::No;
                    }
                }
            }
        }
        if !self.reject.is_empty() {
            for word in &words[self.prefix.len().min(words.len())..] {
                match word {
                    Word::Dyn(_) => return Fit::Maybe,
                    Word::Lit(word) => {
                        let rejected = self.reject.iter().any(|option| {
                            word == option
                                || (option.starts_with("--")
                                    && word.starts_with(&format!("{option}=")))
                                || (option.len() == 2
                                    && !option.starts_with("--")
                                    && word.starts_with(option))
                        });
                        if rejected {
                            return Fit::No;
                        }
                    }
                }
            }
        }
        Fit::Yes
    }

    fn risk(&self) -> Risk {
        self.risk.unwrap_or(default_risk(self.decision))
    }
}

fn default_risk(decision: ExecDecision) -> Risk {
    match decision {
        ExecDecision::Allow => Risk::Low,
        ExecDecision::Ask => Risk::Medium,
        ExecDecision::Deny => Risk::High,
    }
}

/// Why one part of a command got its decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Because {
    /// The strictest rule that matched.
    Rule { rule: RuleSource },
    /// A deny or ask rule that may match once the words are known.
    MayMatch { rule: RuleSource },
    /// No rule matched: `exec.default`.
    Default,
    /// It cannot be proved harmless.
    Hazard { hazard: String },
    /// `exec.sandbox: none`: every command asks.
    Unsandboxed,
}

impl std::fmt::Display for Because {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Because::Rule { rule } => write!(f, "{rule}"),
            Because::MayMatch { rule } => {
                write!(f, "{rule} may match once its words are known")
            }
            Because::Default => f.write_str("no rule matches: exec.default"),
            Because::Hazard { hazard } => f.write_str(hazard),
            Because::Unsandboxed => f.write_str("exec.sandbox is none: every command asks"),
        }
    }
}

/// The decision on one part of a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The source text it comes from.
    pub text: String,
    /// The command decided, wrappers removed (absent for a hazard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The wrappers and code it sits in, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
    pub decision: ExecDecision,
    pub risk: Risk,
    pub because: Because,
}

/// The decision on a whole command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub decision: ExecDecision,
    pub risk: Risk,
    /// Whether it may use the network.
    pub network: bool,
    pub segments: Vec<Segment>,
    /// Literal redirection targets (decided by the path rules).
    #[serde(skip)]
    pub redirects: Vec<parse::Redirect>,
}

/// `exec.rules` with the curated list, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    rules: Vec<Rule>,
    default: ExecDecision,
    sandboxed: bool,
    network: bool,
}

/// A rule whose examples do not do what they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleMismatch {
    pub index: usize,
    pub example: String,
    pub should_match: bool,
}

impl ExecPolicy {
    pub fn compile(config: &ExecConfig) -> ExecPolicy {
        let mut rules: Vec<Rule> = config
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| compile_rule(index, rule))
            .collect();
        rules.extend(CURATED.iter().map(|(prefix, reject)| {
            Rule {
                prefix: prefix
                    .iter()
                    .map(|word| Pattern::Words(vec![(*word).to_owned()]))
                    .collect(),
                decision: ExecDecision::Allow,
                risk: None,
                network: false,
                reject,
                source: RuleSource::Curated {
                    prefix: prefix.join(" "),
                },
            }
        }));
        ExecPolicy {
            rules,
            default: config.default,
            sandboxed: config.sandbox != ExecSandbox::None,
            network: config.network,
        }
    }

    /// The examples of `exec.rules` that fail: a `match` the rule does not
    /// match in every simple command of it, a `not_match` it matches in one.
    pub fn check_examples(config: &ExecConfig) -> Vec<ExampleMismatch> {
        let mut mismatches = Vec::new();
        for (index, rule_config) in config.rules.iter().enumerate() {
            let rule = compile_rule(index, rule_config);
            let commands = |example: &str| -> Vec<Vec<Word>> {
                parse::parse(example)
                    .units
                    .into_iter()
                    .filter_map(|unit| match unit.kind {
                        UnitKind::Command(words) => Some(words),
                        UnitKind::Hazard(_) => None,
                    })
                    .collect()
            };
            for example in &rule_config.matches {
                let commands = commands(example);
                if commands.is_empty() || commands.iter().any(|words| rule.fit(words) != Fit::Yes) {
                    mismatches.push(ExampleMismatch {
                        index,
                        example: example.clone(),
                        should_match: true,
                    });
                }
            }
            for example in &rule_config.not_match {
                if commands(example)
                    .iter()
                    .any(|words| rule.fit(words) == Fit::Yes)
                {
                    mismatches.push(ExampleMismatch {
                        index,
                        example: example.clone(),
                        should_match: false,
                    });
                }
            }
        }
        mismatches
    }

    /// Decides a shell command line.
    pub fn decide_command(&self, command: &str) -> Verdict {
        self.decide(parse::parse(command))
    }

    /// Decides an argument vector (run without a shell).
    pub fn decide_argv(&self, argv: &[String]) -> Verdict {
        self.decide(parse::parse_argv(argv))
    }

    /// Decides what a parsed command would run.
    pub fn decide(&self, script: Script) -> Verdict {
        let mut segments = Vec::with_capacity(script.units.len());
        let mut network = self.network;
        for unit in script.units {
            let segment = match unit.kind {
                UnitKind::Hazard(hazard) => Segment {
                    text: unit.text,
                    command: None,
                    via: unit.via,
                    decision: ExecDecision::Ask,
                    risk: Risk::High,
                    because: Because::Hazard {
                        hazard: hazard.to_string(),
                    },
                },
                UnitKind::Command(words) => {
                    let (decision, risk, because, wants_network) = self.decide_words(&words);
                    network |= wants_network && decision != ExecDecision::Deny;
                    Segment {
                        text: unit.text,
                        command: Some(
                            words
                                .iter()
                                .map(|word| match word {
                                    Word::Lit(word) => parse::quote(word),
                                    Word::Dyn(text) => text.clone(),
                                })
                                .collect::<Vec<_>>()
                                .join(" "),
                        ),
                        via: unit.via,
                        decision,
                        risk,
                        because,
                    }
                }
            };
            segments.push(segment);
        }
        if segments.is_empty() {
            // Nothing to run (an empty line, a comment): nothing to fear,
            // but nothing to allow blindly either.
            segments.push(Segment {
                text: String::new(),
                command: None,
                via: Vec::new(),
                decision: ExecDecision::Ask,
                risk: Risk::Medium,
                because: Because::Hazard {
                    hazard: "no command to run".to_owned(),
                },
            });
        }
        if !self.sandboxed {
            for segment in &mut segments {
                if segment.decision == ExecDecision::Allow {
                    segment.decision = ExecDecision::Ask;
                    segment.because = Because::Unsandboxed;
                }
            }
        }
        let decision = segments
            .iter()
            .map(|segment| segment.decision)
            .max()
            .unwrap_or(ExecDecision::Ask);
        let risk = segments
            .iter()
            .map(|segment| segment.risk)
            .max()
            .unwrap_or(Risk::Medium);
        Verdict {
            decision,
            risk,
            network,
            segments,
            redirects: script.redirects,
        }
    }

    /// A simple command's decision: the strictest of the rules that match
    /// it (a deny or ask rule that may match once its words are known
    /// asks), else `exec.default`.
    fn decide_words(&self, words: &[Word]) -> (ExecDecision, Risk, Because, bool) {
        // Deny and ask rules also see a program named by path by its name
        // (`/bin/rm` is `rm`); allow rules never do (`./ls` is not `ls`).
        let by_name: Option<Vec<Word>> = words.first().and_then(Word::literal).and_then(|name| {
            let base = name
                .rsplit('/')
                .next()
                .filter(|base| *base != name && !base.is_empty())?;
            let mut renamed = words.to_vec();
            renamed[0] = Word::Lit(base.to_owned());
            Some(renamed)
        });
        type Pick = (ExecDecision, Risk, Because, bool);
        let stricter = |candidate: &Pick, current: &Option<Pick>| {
            current
                .as_ref()
                .is_none_or(|current| (candidate.0, candidate.1) > (current.0, current.1))
        };
        let mut matched: Option<Pick> = None;
        let mut maybe: Option<Pick> = None;
        for rule in &self.rules {
            let mut fit = rule.fit(words);
            if rule.decision != ExecDecision::Allow
                && fit == Fit::No
                && let Some(renamed) = &by_name
            {
                fit = rule.fit(renamed);
            }
            let source = || rule.source.clone();
            match fit {
                Fit::No => {}
                Fit::Yes => {
                    let pick = (
                        rule.decision,
                        rule.risk(),
                        Because::Rule { rule: source() },
                        rule.network,
                    );
                    if stricter(&pick, &matched) {
                        matched = Some(pick);
                    }
                }
                // An allow rule that may match allows nothing.
                Fit::Maybe if rule.decision == ExecDecision::Allow => {}
                Fit::Maybe => {
                    let pick = (
                        ExecDecision::Ask,
                        rule.risk(),
                        Because::MayMatch { rule: source() },
                        false,
                    );
                    if stricter(&pick, &maybe) {
                        maybe = Some(pick);
                    }
                }
            }
        }
        let base = matched.unwrap_or_else(|| {
            (
                self.default,
                default_risk(self.default).max(Risk::Medium),
                Because::Default,
                false,
            )
        });
        match maybe {
            Some(maybe) if stricter(&maybe, &Some(base.clone())) => maybe,
            _ => base,
        }
    }
}

fn compile_rule(index: usize, rule: &ExecRuleConfig) -> Rule {
    Rule {
        prefix: rule
            .prefix
            .iter()
            .map(|token| match token {
                ExecToken::Word(word) if word == "*" => Pattern::Any,
                ExecToken::Word(word) => Pattern::Words(vec![word.clone()]),
                ExecToken::Alternatives(words) => Pattern::Words(words.clone()),
            })
            .collect(),
        decision: rule.decision,
        risk: rule.risk,
        network: rule.network,
        reject: &[],
        source: RuleSource::Config { index },
    }
}
