//! Where a script's statements and class members start, to check that
//! blanking its types left the same program: the TypeScript tree and the
//! blanked code's JavaScript tree must agree on every start, compared as
//! lines and columns of the blanked code, read past its blanks (so
//! `abstract class` and `class` start at the same place). A statement
//! blanked whole, and empty statements (which its `;` may become), are
//! left out on both sides.

use oxc_ast::ast::{ClassElement, Program, Statement};
use oxc_ast_visit::{Visit, walk};
use oxc_span::GetSpan;

use crate::position::{Lines, Position};
use crate::strip::{blanked_member, types_only_statement};

/// The first place where the two trees' starts differ, if any.
pub(crate) fn first_difference(
    source: &Lines<'_>,
    typed: &Program<'_>,
    blanked: &Program<'_>,
    code: &str,
) -> Option<Position> {
    let code_lines = Lines::new(code);
    let mut before = Starts {
        code,
        code_lines: &code_lines,
        source: Some(source),
        starts: Vec::new(),
    };
    before.visit_program(typed);
    let mut after = Starts {
        code,
        code_lines: &code_lines,
        source: None,
        starts: Vec::new(),
    };
    after.visit_program(blanked);
    let (mut before, mut after) = (before.starts, after.starts);
    before.sort_unstable();
    after.sort_unstable();
    let mut one = before.iter();
    let mut two = after.iter();
    loop {
        match (one.next(), two.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) => return Some(Position::from(*a.min(b))),
            (Some(a), None) | (None, Some(a)) => return Some(Position::from(*a)),
            (None, None) => return None,
        }
    }
}

impl From<(u32, u32)> for Position {
    fn from((line, column): (u32, u32)) -> Position {
        Position { line, column }
    }
}

struct Starts<'c, 'l> {
    code: &'c str,
    code_lines: &'l Lines<'c>,
    /// The text the tree's offsets are in, when it is not `code`.
    source: Option<&'l Lines<'l>>,
    starts: Vec<(u32, u32)>,
}

impl Starts<'_, '_> {
    /// Where `offset` is in the blanked code, moved past its blanks.
    fn note(&mut self, offset: u32) {
        let at = match self.source {
            Some(source) => self.code_lines.offset_of(source.at(offset)),
            None => offset as usize,
        };
        let rest = self.code.get(at..).unwrap_or_default();
        let skipped = rest.len() - rest.trim_start().len();
        let Position { line, column } = self.code_lines.at((at + skipped) as u32);
        self.starts.push((line, column));
    }
}

impl<'a> Visit<'a> for Starts<'_, '_> {
    fn visit_statement(&mut self, statement: &Statement<'a>) {
        if types_only_statement(statement) {
            return;
        }
        if !matches!(statement, Statement::EmptyStatement(_)) {
            self.note(statement.span().start);
        }
        walk::walk_statement(self, statement);
    }

    fn visit_class_element(&mut self, element: &ClassElement<'a>) {
        if blanked_member(element) {
            return;
        }
        self.note(element.span().start);
        walk::walk_class_element(self, element);
    }
}
