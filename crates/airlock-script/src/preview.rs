//! The static preview: the `codemode.X(…)` call sites a script's text
//! shows, what their literal arguments say, and the places that make the
//! list incomplete. For the human only: the broker gates every call the
//! script really makes.

use oxc_ast::ast::{
    Argument, ArrayExpressionElement, ArrowFunctionExpression, BindingIdentifier, CallExpression,
    Class, ComputedMemberExpression, ConditionalExpression, DoWhileStatement, Expression,
    ForInStatement, ForOfStatement, ForStatement, Function, IdentifierReference, IfStatement,
    LogicalExpression, ObjectPropertyKind, PropertyKey, PropertyKind, StaticMemberExpression,
    SwitchStatement, ThisExpression, TryStatement, UnaryOperator, WhileStatement,
};
use oxc_ast_visit::{Visit, walk};
use oxc_span::GetSpan;
use oxc_syntax::scope::ScopeFlags;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::position::{Lines, Position};

/// The name scripts reach their tools by.
const CODEMODE: &str = "codemode";
/// The most call sites a preview lists; beyond, it counts them.
const MAX_SITES: usize = 500;
/// The most gaps a preview lists.
const MAX_GAPS: usize = 50;
/// The longest excerpt of a call's text kept for display, in characters.
const MAX_EXCERPT: usize = 160;

/// How often a call site may run, as far as its place in the text shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// At the top level, outside any branch: once, if the script gets there.
    Once,
    /// Inside a branch (`if`, `switch`, `?:`, `&&`, `catch`): at most once.
    Maybe,
    /// Inside a loop: any number of times.
    Repeated,
    /// Inside a function or callback: as often as it is called.
    InFunction,
}

/// One `codemode.X(…)` or `codemode["X"](…)` in the text.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallSite {
    pub tool: String,
    pub line: u32,
    pub column: u32,
    pub reach: Reach,
    /// The first argument, when all of it is a literal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// The literal properties of an object argument that is only partly
    /// literal (the rest are computed when the script runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known: Option<Map<String, Value>>,
    /// Its arguments are spread, so none can be read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub spread: bool,
    /// The call's text, on one line, shortened.
    pub excerpt: String,
}

/// A place that makes the list of call sites incomplete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub reason: String,
    pub line: u32,
    pub column: u32,
}

/// What a script's text shows it calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Preview {
    pub calls: Vec<CallSite>,
    /// Call sites beyond the first [`MAX_SITES`].
    #[serde(skip_serializing_if = "is_zero")]
    pub more_calls: usize,
    /// Empty when every way the script can reach `codemode` is a call site
    /// above.
    pub gaps: Vec<Gap>,
    pub complete: bool,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// The preview of a parsed script.
pub(crate) fn of(source: &str, program: &oxc_ast::ast::Program<'_>, lines: &Lines<'_>) -> Preview {
    let mut finder = Finder {
        source,
        lines,
        preview: Preview::default(),
        branches: 0,
        loops: 0,
        functions: 0,
        own_this: 0,
    };
    finder.visit_program(program);
    let mut preview = finder.preview;
    preview.complete = preview.gaps.is_empty() && !preview.calls.iter().any(|call| call.spread);
    preview
}

struct Finder<'s, 'l> {
    source: &'s str,
    lines: &'l Lines<'s>,
    preview: Preview,
    branches: u32,
    loops: u32,
    functions: u32,
    /// Non-arrow functions and classes around: where `this` is not the
    /// global object.
    own_this: u32,
}

impl Finder<'_, '_> {
    fn position(&self, offset: u32) -> Position {
        self.lines.at(offset)
    }

    fn gap(&mut self, offset: u32, reason: &str) {
        if self.preview.gaps.len() >= MAX_GAPS {
            return;
        }
        let Position { line, column } = self.position(offset);
        self.preview.gaps.push(Gap {
            reason: reason.to_owned(),
            line,
            column,
        });
    }

    fn reach(&self) -> Reach {
        if self.functions > 0 {
            Reach::InFunction
        } else if self.loops > 0 {
            Reach::Repeated
        } else if self.branches > 0 {
            Reach::Maybe
        } else {
            Reach::Once
        }
    }

    fn site(&mut self, tool: String, call: &CallExpression<'_>) {
        if self.preview.calls.len() >= MAX_SITES {
            self.preview.more_calls += 1;
            return;
        }
        let Position { line, column } = self.position(call.span.start);
        let spread = call
            .arguments
            .iter()
            .any(|argument| matches!(argument, Argument::SpreadElement(_)));
        let first = call.arguments.first().and_then(Argument::as_expression);
        let args = if spread {
            None
        } else {
            first.and_then(literal)
        };
        let known = match (&args, first, spread) {
            (None, Some(expression), false) => known_properties(expression),
            _ => None,
        };
        self.preview.calls.push(CallSite {
            tool,
            line,
            column,
            reach: self.reach(),
            args,
            known,
            spread,
            excerpt: excerpt(self.source, call.span.start, call.span.end),
        });
    }

    fn nested<T>(
        &mut self,
        counter: fn(&mut Self) -> &mut u32,
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        *counter(self) += 1;
        let result = f(self);
        *counter(self) -= 1;
        result
    }
}

/// `codemode` itself, through parentheses and TypeScript's wrappers.
fn is_codemode(expression: &Expression<'_>) -> bool {
    matches!(expression.get_inner_expression(), Expression::Identifier(id) if id.name == CODEMODE)
}

/// A string a computed key is known to hold.
fn literal_key(expression: &Expression<'_>) -> Option<String> {
    match expression.get_inner_expression() {
        Expression::StringLiteral(text) => Some(text.value.to_string()),
        Expression::TemplateLiteral(template) if template.expressions.is_empty() => template
            .quasis
            .first()
            .and_then(|quasi| quasi.value.cooked.as_ref())
            .map(ToString::to_string),
        _ => None,
    }
}

/// The deepest literal the preview reads; deeper is "computed".
const MAX_LITERAL_DEPTH: u32 = 32;

/// The value of an expression made of literals only.
fn literal(expression: &Expression<'_>) -> Option<Value> {
    literal_within(expression, MAX_LITERAL_DEPTH)
}

fn literal_within(expression: &Expression<'_>, depth: u32) -> Option<Value> {
    let depth = depth.checked_sub(1)?;
    match expression.get_inner_expression() {
        Expression::StringLiteral(text) => Some(Value::String(text.value.to_string())),
        Expression::BooleanLiteral(flag) => Some(Value::Bool(flag.value)),
        Expression::NullLiteral(_) => Some(Value::Null),
        Expression::NumericLiteral(number) => number_value(number.value),
        Expression::UnaryExpression(unary) if unary.operator == UnaryOperator::UnaryNegation => {
            match unary.argument.get_inner_expression() {
                Expression::NumericLiteral(number) => number_value(-number.value),
                _ => None,
            }
        }
        Expression::TemplateLiteral(_) => literal_key(expression).map(Value::String),
        Expression::ArrayExpression(array) => array
            .elements
            .iter()
            .map(|element| match element {
                ArrayExpressionElement::SpreadElement(_) | ArrayExpressionElement::Elision(_) => {
                    None
                }
                _ => element
                    .as_expression()
                    .and_then(|element| literal_within(element, depth)),
            })
            .collect::<Option<Vec<Value>>>()
            .map(Value::Array),
        Expression::ObjectExpression(_) => match object_properties(expression, depth) {
            Some((map, true)) => Some(Value::Object(map)),
            _ => None,
        },
        _ => None,
    }
}

fn number_value(number: f64) -> Option<Value> {
    if number.fract() == 0.0 && number.abs() < 9_007_199_254_740_992.0 {
        Some(Value::from(number as i64))
    } else {
        serde_json::Number::from_f64(number).map(Value::Number)
    }
}

/// An object literal's literal properties, and whether they are all of it.
fn object_properties(
    expression: &Expression<'_>,
    depth: u32,
) -> Option<(Map<String, Value>, bool)> {
    let Expression::ObjectExpression(object) = expression.get_inner_expression() else {
        return None;
    };
    let mut map = Map::new();
    let mut whole = true;
    for property in &object.properties {
        let ObjectPropertyKind::ObjectProperty(property) = property else {
            whole = false;
            continue;
        };
        if property.kind != PropertyKind::Init || property.method || property.shorthand {
            whole = false;
            continue;
        }
        let key = match &property.key {
            PropertyKey::StaticIdentifier(name) => Some(name.name.to_string()),
            PropertyKey::StringLiteral(text) => Some(text.value.to_string()),
            PropertyKey::NumericLiteral(number) => {
                number_value(number.value).map(|v| v.to_string())
            }
            _ => property.key.as_expression().and_then(literal_key),
        };
        // `__proto__: …` sets the prototype: JSON.stringify leaves it out.
        let Some(key) = key.filter(|key| property.computed || key != "__proto__") else {
            whole = false;
            continue;
        };
        match literal_within(&property.value, depth) {
            Some(value) => {
                map.insert(key, value);
            }
            None => whole = false,
        }
    }
    Some((map, whole))
}

fn known_properties(expression: &Expression<'_>) -> Option<Map<String, Value>> {
    object_properties(expression, MAX_LITERAL_DEPTH)
        .map(|(map, _)| map)
        .filter(|map| !map.is_empty())
}

/// The text from `start` to `end` on one line, at most [`MAX_EXCERPT`]
/// characters.
fn excerpt(source: &str, start: u32, end: u32) -> String {
    let text = source.get(start as usize..end as usize).unwrap_or_default();
    let mut out = String::new();
    let mut space = false;
    let mut count = 0;
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
            count += 1;
        }
        space = false;
        if count >= MAX_EXCERPT {
            out.push('…');
            break;
        }
        out.push(c);
        count += 1;
    }
    out
}

impl<'a> Visit<'a> for Finder<'_, '_> {
    fn visit_call_expression(&mut self, call: &CallExpression<'a>) {
        match call.callee.get_inner_expression() {
            Expression::StaticMemberExpression(member) if is_codemode(&member.object) => {
                self.site(member.property.name.to_string(), call);
                self.visit_arguments(&call.arguments);
            }
            Expression::ComputedMemberExpression(member) if is_codemode(&member.object) => {
                match literal_key(&member.expression) {
                    Some(name) => self.site(name, call),
                    None => {
                        self.gap(
                            member.expression.span().start,
                            "codemode is indexed by a computed key",
                        );
                        self.visit_expression(&member.expression);
                    }
                }
                self.visit_arguments(&call.arguments);
            }
            _ => walk::walk_call_expression(self, call),
        }
        if let Some(spread) = call.arguments.iter().find_map(|argument| match argument {
            Argument::SpreadElement(spread) => Some(spread),
            _ => None,
        }) && is_site(&call.callee)
        {
            self.gap(spread.span.start, "a call's arguments are spread");
        }
    }

    fn visit_identifier_reference(&mut self, id: &IdentifierReference<'a>) {
        if id.name == CODEMODE {
            self.gap(id.span.start, "codemode is aliased or passed on");
        } else if id.name == "globalThis" {
            self.gap(
                id.span.start,
                "globalThis is used, and codemode can be reached through it",
            );
        }
    }

    fn visit_binding_identifier(&mut self, id: &BindingIdentifier<'a>) {
        if id.name == CODEMODE {
            self.gap(id.span.start, "a binding named codemode hides the tools");
        }
    }

    fn visit_static_member_expression(&mut self, member: &StaticMemberExpression<'a>) {
        if member.property.name == CODEMODE {
            self.gap(
                member.property.span.start,
                "codemode is reached through another object",
            );
        }
        walk::walk_static_member_expression(self, member);
    }

    fn visit_this_expression(&mut self, this: &ThisExpression) {
        // An arrow function's `this` is its surroundings'.
        if self.own_this == 0 {
            self.gap(
                this.span.start,
                "`this` at the top level is the global object",
            );
        }
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        self.nested(
            |f| &mut f.own_this,
            |f| {
                f.nested(|f| &mut f.functions, |f| walk::walk_function(f, it, flags));
            },
        );
    }

    fn visit_class(&mut self, it: &Class<'a>) {
        self.nested(|f| &mut f.own_this, |f| walk::walk_class(f, it));
    }

    fn visit_computed_member_expression(&mut self, member: &ComputedMemberExpression<'a>) {
        if literal_key(&member.expression).is_some_and(|key| key == CODEMODE) {
            self.gap(
                member.expression.span().start,
                "codemode is reached through another object",
            );
        }
        walk::walk_computed_member_expression(self, member);
    }

    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        self.nested(
            |f| &mut f.functions,
            |f| walk::walk_arrow_function_expression(f, it),
        );
    }

    fn visit_for_statement(&mut self, it: &ForStatement<'a>) {
        self.nested(|f| &mut f.loops, |f| walk::walk_for_statement(f, it));
    }

    fn visit_for_in_statement(&mut self, it: &ForInStatement<'a>) {
        self.nested(|f| &mut f.loops, |f| walk::walk_for_in_statement(f, it));
    }

    fn visit_for_of_statement(&mut self, it: &ForOfStatement<'a>) {
        self.nested(|f| &mut f.loops, |f| walk::walk_for_of_statement(f, it));
    }

    fn visit_while_statement(&mut self, it: &WhileStatement<'a>) {
        self.nested(|f| &mut f.loops, |f| walk::walk_while_statement(f, it));
    }

    fn visit_do_while_statement(&mut self, it: &DoWhileStatement<'a>) {
        self.nested(|f| &mut f.loops, |f| walk::walk_do_while_statement(f, it));
    }

    fn visit_if_statement(&mut self, it: &IfStatement<'a>) {
        self.visit_expression(&it.test);
        self.nested(
            |f| &mut f.branches,
            |f| {
                f.visit_statement(&it.consequent);
                if let Some(alternate) = &it.alternate {
                    f.visit_statement(alternate);
                }
            },
        );
    }

    fn visit_switch_statement(&mut self, it: &SwitchStatement<'a>) {
        self.visit_expression(&it.discriminant);
        self.nested(|f| &mut f.branches, |f| f.visit_switch_cases(&it.cases));
    }

    fn visit_conditional_expression(&mut self, it: &ConditionalExpression<'a>) {
        self.visit_expression(&it.test);
        self.nested(
            |f| &mut f.branches,
            |f| {
                f.visit_expression(&it.consequent);
                f.visit_expression(&it.alternate);
            },
        );
    }

    fn visit_logical_expression(&mut self, it: &LogicalExpression<'a>) {
        self.visit_expression(&it.left);
        self.nested(|f| &mut f.branches, |f| f.visit_expression(&it.right));
    }

    fn visit_try_statement(&mut self, it: &TryStatement<'a>) {
        self.visit_block_statement(&it.block);
        self.nested(
            |f| &mut f.branches,
            |f| {
                if let Some(handler) = &it.handler {
                    f.visit_catch_clause(handler);
                }
            },
        );
        if let Some(finalizer) = &it.finalizer {
            self.visit_block_statement(finalizer);
        }
    }
}

/// Whether a callee is a call site's (`codemode.X` or `codemode[…]`).
fn is_site(callee: &Expression<'_>) -> bool {
    match callee.get_inner_expression() {
        Expression::StaticMemberExpression(member) => is_codemode(&member.object),
        Expression::ComputedMemberExpression(member) => is_codemode(&member.object),
        _ => false,
    }
}
