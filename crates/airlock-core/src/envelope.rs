//! The response envelope every tool result is wrapped in (DESIGN §6).
