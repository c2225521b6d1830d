//! TypeScript's erasable syntax blanked in place.
//!
//! Every character of a type, an `interface`, a modifier or an assertion
//! becomes one space; line breaks stay, so what runs has the author's lines
//! and columns. Two rewrites keep the meaning where plain blanking would
//! change it: a blanked statement or class member starts with `;` (so the
//! line before cannot run on into the line after), and an arrow function
//! whose return type spans lines has its `)` moved to the end of the type
//! (a line break may not come before `=>`). What TypeScript compiles into
//! code is refused, never rewritten.

use oxc_ast::ast::{
    AccessorPropertyType, ArrowFunctionExpression, Class, ClassElement, Declaration, Decorator,
    FormalParameter, Function, MethodDefinitionType, PropertyDefinitionType, PropertyKey,
    Statement, TSAsExpression, TSClassImplements, TSNamespaceDeclaration,
    TSNamespaceDeclarationBody, TSNonNullExpression, TSSatisfiesExpression, TSTypeAnnotation,
    TSTypeAssertion, TSTypeParameterDeclaration, TSTypeParameterInstantiation, VariableDeclarator,
};
use oxc_ast_visit::{Visit, walk};
use oxc_parser::{Kind, Token};
use oxc_span::{GetSpan, Span};
use oxc_syntax::scope::ScopeFlags;

use crate::ParseError;
use crate::position::Lines;

/// Why a script's TypeScript cannot run, at a byte offset.
pub(crate) struct Refusal {
    message: String,
    offset: u32,
}

impl Refusal {
    pub(crate) fn at(self, lines: &Lines<'_>) -> ParseError {
        let position = lines.at(self.offset);
        ParseError {
            message: self.message,
            line: position.line,
            column: position.column,
        }
    }
}

/// `source` with the erasable TypeScript of `program` blanked.
pub(crate) fn blank(
    source: &str,
    program: &oxc_ast::ast::Program<'_>,
    tokens: &[Token],
) -> Result<String, Refusal> {
    let mut blanker = Blanker {
        source,
        tokens,
        blanks: Vec::new(),
        puts: Vec::new(),
        refusal: None,
    };
    blanker.visit_program(program);
    if let Some(refusal) = blanker.refusal {
        return Err(refusal);
    }
    Ok(blanker.render())
}

/// A line terminator, which blanking keeps.
fn ends_line(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

struct Blanker<'s, 't> {
    source: &'s str,
    tokens: &'t [Token],
    /// Byte ranges whose characters become spaces.
    blanks: Vec<(u32, u32)>,
    /// Characters written over the one starting at a byte offset.
    puts: Vec<(u32, char)>,
    refusal: Option<Refusal>,
}

impl Blanker<'_, '_> {
    fn refuse(&mut self, offset: u32, message: impl Into<String>) {
        if self.refusal.is_none() {
            self.refusal = Some(Refusal {
                message: message.into(),
                offset,
            });
        }
    }

    fn blank(&mut self, start: u32, end: u32) {
        if start < end {
            self.blanks.push((start, end));
        }
    }

    /// A whole statement or class member, with `;` where it began.
    fn blank_item(&mut self, span: Span) {
        self.blank(span.start, span.end);
        self.puts.push((span.start, ';'));
    }

    fn crosses_lines(&self, start: u32, end: u32) -> bool {
        self.source
            .get(start as usize..end as usize)
            .is_some_and(|text| text.contains(ends_line))
    }

    /// The first token starting at or after `offset`.
    fn token_from(&self, offset: u32) -> Option<Token> {
        let at = self.tokens.partition_point(|token| token.start() < offset);
        self.tokens.get(at).copied()
    }

    /// The last token ending at or before `offset`.
    fn token_before(&self, offset: u32) -> Option<Token> {
        let at = self.tokens.partition_point(|token| token.end() <= offset);
        at.checked_sub(1)
            .and_then(|at| self.tokens.get(at).copied())
    }

    /// Blanks the token after `offset` (past a `]` that closes a computed
    /// key) when it is of `kind`: the `?` of `x?: T`, the `!` of `x!: T`.
    fn blank_marker_after(&mut self, offset: u32, computed: bool, kind: Kind) {
        let mut next = self.token_from(offset);
        if computed && next.is_some_and(|token| token.kind() == Kind::RBrack) {
            next = next.and_then(|token| self.token_from(token.end()));
        }
        if let Some(token) = next.filter(|token| token.kind() == kind) {
            self.blank(token.start(), token.end());
        }
    }

    /// Blanks TypeScript's modifiers (`public`, `readonly`, …) among the
    /// tokens from `start` up to `key`.
    fn blank_modifiers(&mut self, start: u32, key: u32) {
        let from = self.tokens.partition_point(|token| token.start() < start);
        let modifiers: Vec<Token> = self.tokens[from..]
            .iter()
            .take_while(|token| token.start() < key)
            .filter(|token| {
                matches!(
                    token.kind(),
                    Kind::Public
                        | Kind::Private
                        | Kind::Protected
                        | Kind::Readonly
                        | Kind::Override
                        | Kind::Declare
                        | Kind::Abstract
                )
            })
            .copied()
            .collect();
        for token in modifiers {
            self.blank(token.start(), token.end());
        }
    }

    fn refuse_decorators(&mut self, decorators: &[Decorator<'_>]) {
        if let Some(first) = decorators.first() {
            self.refuse(
                first.span.start,
                "decorators cannot run in a script; call the function instead",
            );
        }
    }

    /// The script with every blank and put applied.
    fn render(mut self) -> String {
        self.blanks.sort_unstable();
        self.puts.sort_unstable();
        let mut out = String::with_capacity(self.source.len());
        let mut blanks = self.blanks.iter().peekable();
        let mut puts = self.puts.iter().peekable();
        for (at, c) in self.source.char_indices() {
            let at = at as u32;
            while blanks.peek().is_some_and(|(_, end)| *end <= at) {
                blanks.next();
            }
            while puts.peek().is_some_and(|(put, _)| *put < at) {
                puts.next();
            }
            if let Some((_, put)) = puts.peek().filter(|(put, _)| *put == at) {
                out.push(*put);
            } else if blanks.peek().is_some_and(|(start, _)| *start <= at) && !ends_line(c) {
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// Whether a statement only declares types (and is blanked whole).
pub(crate) fn types_only_statement(statement: &Statement<'_>) -> bool {
    statement.as_declaration().is_some_and(types_only)
}

/// Whether a class member is TypeScript only (and is blanked whole): an
/// index signature, an abstract or `declare`d member, an overload.
pub(crate) fn blanked_member(element: &ClassElement<'_>) -> bool {
    match element {
        ClassElement::TSIndexSignature(_) => true,
        ClassElement::MethodDefinition(method) => {
            method.r#type == MethodDefinitionType::TSAbstractMethodDefinition
                || method.value.body.is_none()
        }
        ClassElement::PropertyDefinition(property) => {
            property.r#type == PropertyDefinitionType::TSAbstractPropertyDefinition
                || property.declare
        }
        ClassElement::AccessorProperty(accessor) => {
            accessor.r#type == AccessorPropertyType::TSAbstractAccessorProperty
        }
        ClassElement::StaticBlock(_) => false,
    }
}

/// Whether a declaration only declares types.
fn types_only(declaration: &Declaration<'_>) -> bool {
    match declaration {
        Declaration::TSTypeAliasDeclaration(_)
        | Declaration::TSInterfaceDeclaration(_)
        | Declaration::TSExternalModuleDeclaration(_)
        | Declaration::TSGlobalDeclaration(_) => true,
        Declaration::VariableDeclaration(variable) => variable.declare,
        Declaration::FunctionDeclaration(function) => function.declare || function.body.is_none(),
        Declaration::ClassDeclaration(class) => class.declare,
        Declaration::TSEnumDeclaration(declared) => declared.declare,
        Declaration::TSNamespaceDeclaration(namespace) => namespace_types_only(namespace),
        Declaration::TSImportEqualsDeclaration(_) => false,
    }
}

fn namespace_types_only(namespace: &TSNamespaceDeclaration<'_>) -> bool {
    if namespace.declare {
        return true;
    }
    match &namespace.body {
        TSNamespaceDeclarationBody::TSNamespaceDeclaration(inner) => namespace_types_only(inner),
        TSNamespaceDeclarationBody::TSModuleBlock(block) => {
            block.body.iter().all(|statement| match statement {
                Statement::ExportDeclaration(export) => types_only(&export.declaration),
                _ => statement.as_declaration().is_some_and(types_only),
            })
        }
    }
}

impl<'a> Visit<'a> for Blanker<'_, '_> {
    fn visit_statement(&mut self, statement: &Statement<'a>) {
        if self.refusal.is_some() {
            return;
        }
        let span = statement.span();
        match statement {
            Statement::ImportDeclaration(_)
            | Statement::ExportAllDeclaration(_)
            | Statement::ExportDefaultDeclaration(_)
            | Statement::ExportDeclaration(_)
            | Statement::ExportNamedDeclaration(_)
            | Statement::ExportFromDeclaration(_)
            | Statement::TSExportAssignment(_)
            | Statement::TSNamespaceExportDeclaration(_) => self.refuse(
                span.start,
                "a script cannot import or export; its tools are on `codemode`",
            ),
            Statement::TSEnumDeclaration(declared) if !declared.declare => self.refuse(
                span.start,
                "`enum` is TypeScript that makes code, which a script cannot use; use a plain object",
            ),
            Statement::TSNamespaceDeclaration(namespace) if !namespace_types_only(namespace) => {
                self.refuse(
                    span.start,
                    "a `namespace` with values is TypeScript that makes code, which a script cannot use",
                );
            }
            Statement::TSImportEqualsDeclaration(_) => self.refuse(
                span.start,
                "`import … =` is TypeScript that makes code, which a script cannot use",
            ),
            _ => match statement.as_declaration() {
                Some(declaration) if types_only(declaration) => self.blank_item(span),
                _ => walk::walk_statement(self, statement),
            },
        }
    }

    fn visit_decorator(&mut self, decorator: &Decorator<'a>) {
        self.refuse_decorators(std::slice::from_ref(decorator));
    }

    fn visit_ts_type_annotation(&mut self, annotation: &TSTypeAnnotation<'a>) {
        self.blank(annotation.span.start, annotation.span.end);
    }

    fn visit_ts_type_parameter_declaration(&mut self, it: &TSTypeParameterDeclaration<'a>) {
        self.blank(it.span.start, it.span.end);
    }

    fn visit_ts_type_parameter_instantiation(&mut self, it: &TSTypeParameterInstantiation<'a>) {
        self.blank(it.span.start, it.span.end);
    }

    fn visit_ts_class_implements(&mut self, _: &TSClassImplements<'a>) {}

    fn visit_ts_as_expression(&mut self, it: &TSAsExpression<'a>) {
        self.blank(it.expression.span().end, it.span.end);
        self.visit_expression(&it.expression);
    }

    fn visit_ts_satisfies_expression(&mut self, it: &TSSatisfiesExpression<'a>) {
        self.blank(it.expression.span().end, it.span.end);
        self.visit_expression(&it.expression);
    }

    fn visit_ts_non_null_expression(&mut self, it: &TSNonNullExpression<'a>) {
        self.blank(it.expression.span().end, it.span.end);
        self.visit_expression(&it.expression);
    }

    fn visit_ts_type_assertion(&mut self, it: &TSTypeAssertion<'a>) {
        let start = it.expression.span().start;
        if self.crosses_lines(it.span.start, start) {
            self.refuse(
                it.span.start,
                "a `<T>value` assertion across lines cannot be blanked; write `value as T`",
            );
            return;
        }
        self.blank(it.span.start, start);
        self.visit_expression(&it.expression);
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        if it.definite {
            self.blank_marker_after(it.id.span().end, false, Kind::Bang);
        }
        walk::walk_variable_declarator(self, it);
    }

    fn visit_formal_parameter(&mut self, it: &FormalParameter<'a>) {
        if it.accessibility.is_some() || it.readonly || it.r#override {
            self.refuse(
                it.span.start,
                "a parameter property is TypeScript that makes code, which a script cannot use; assign the field in the constructor",
            );
            return;
        }
        if it.optional {
            self.blank_marker_after(it.pattern.span().end, false, Kind::Question);
        }
        walk::walk_formal_parameter(self, it);
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        if let Some(this) = &it.this_param {
            self.blank(this.span.start, this.span.end);
            if let Some(comma) = self
                .token_from(this.span.end)
                .filter(|token| token.kind() == Kind::Comma)
            {
                self.blank(comma.start(), comma.end());
            }
        }
        walk::walk_function(self, it, flags);
    }

    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        if let Some(returns) = &it.return_type {
            // No line break may come between an arrow's `)` and its `=>`:
            // where the type held one, the `)` moves to the type's end.
            if let Some(paren) = self
                .token_before(returns.span.start)
                .filter(|token| token.kind() == Kind::RParen)
                && self.crosses_lines(paren.end(), returns.span.end)
            {
                let mut last = (returns.span.end as usize).saturating_sub(1);
                while !self.source.is_char_boundary(last) {
                    last -= 1;
                }
                self.blank(paren.start(), paren.end());
                self.puts.push((last as u32, ')'));
            }
        }
        walk::walk_arrow_function_expression(self, it);
    }

    fn visit_class(&mut self, class: &Class<'a>) {
        self.refuse_decorators(&class.decorators);
        if class.r#abstract {
            let keyword = self
                .token_before(class.span.start)
                .filter(|token| token.kind() == Kind::Abstract)
                .or_else(|| {
                    self.token_from(class.span.start)
                        .filter(|token| token.kind() == Kind::Abstract)
                });
            if let Some(keyword) = keyword {
                self.blank(keyword.start(), keyword.end());
            }
        }
        if let (Some(first), Some(last)) = (class.implements.first(), class.implements.last())
            && let Some(keyword) = self
                .token_before(first.span.start)
                .filter(|token| token.kind() == Kind::Implements)
        {
            self.blank(keyword.start(), last.span.end);
        }
        walk::walk_class(self, class);
    }

    fn visit_class_element(&mut self, element: &ClassElement<'a>) {
        if self.refusal.is_some() {
            return;
        }
        if blanked_member(element) {
            self.blank_item(element.span());
            return;
        }
        match element {
            ClassElement::TSIndexSignature(_) => {}
            ClassElement::MethodDefinition(method) => {
                self.refuse_decorators(&method.decorators);
                self.member(method.span, &method.key, method.computed);
                if method.optional {
                    self.blank_marker_after(key_end(&method.key), method.computed, Kind::Question);
                }
                walk::walk_method_definition(self, method);
            }
            ClassElement::PropertyDefinition(property) => {
                self.refuse_decorators(&property.decorators);
                self.member(property.span, &property.key, property.computed);
                let end = key_end(&property.key);
                if property.optional {
                    self.blank_marker_after(end, property.computed, Kind::Question);
                }
                if property.definite {
                    self.blank_marker_after(end, property.computed, Kind::Bang);
                }
                walk::walk_property_definition(self, property);
            }
            ClassElement::AccessorProperty(accessor) => {
                self.refuse_decorators(&accessor.decorators);
                self.member(accessor.span, &accessor.key, accessor.computed);
                if accessor.definite {
                    self.blank_marker_after(key_end(&accessor.key), accessor.computed, Kind::Bang);
                }
                walk::walk_accessor_property(self, accessor);
            }
            ClassElement::StaticBlock(_) => walk::walk_class_element(self, element),
        }
    }
}

impl Blanker<'_, '_> {
    /// A class member's modifiers, up to its key (or the `[` before it).
    fn member(&mut self, span: Span, key: &PropertyKey<'_>, computed: bool) {
        let mut key_start = key.span().start;
        if computed
            && let Some(bracket) = self
                .token_before(key_start)
                .filter(|token| token.kind() == Kind::LBrack)
        {
            key_start = bracket.start();
        }
        self.blank_modifiers(span.start, key_start);
    }
}

fn key_end(key: &PropertyKey<'_>) -> u32 {
    key.span().end
}
