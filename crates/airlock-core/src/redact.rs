//! Redaction of tool parameters for the audit log and for display (DESIGN §8).
