//! "Did you mean": the known name nearest to one that was mistyped.

/// The candidate nearest to `given`, if one is near enough to be what was
/// meant: Jaro-Winkler similarity of at least 0.8, as cargo and clap use.
pub fn nearest<'a>(given: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(given, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn a_typo_finds_its_name_and_nonsense_finds_none() {
        let names = ["read_file", "write_file", "edit_file", "grep"];
        assert_eq!(nearest("wirte_file", names), Some("write_file"));
        assert_eq!(nearest("read_fil", names), Some("read_file"));
        assert_eq!(nearest("zzzz", names), None);
        assert_eq!(nearest("x", []), None);
    }
}
