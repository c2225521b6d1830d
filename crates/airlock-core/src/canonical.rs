//! RFC 8785 canonical JSON and the hashing helpers built on it (written with the
//! audit log).
