//! Spec 001's answers in words: a reply to a confirmation decides it.
//! `yes`, `y` and `confirm` approve (case-insensitive, in the languages the
//! spec is written in: 是, 是的, 确认, 同意, 批准 too); anything else denies.
//! `yes: <reason>` approves with a reason (a risk may require one), and
//! `no: <reason>` denies with one.

/// What a reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub approve: bool,
    pub reason: Option<String>,
}

const YES: [&str; 8] = ["yes", "y", "confirm", "是", "是的", "确认", "同意", "批准"];

/// Reads a reply to a confirmation.
pub(crate) fn answer(text: &str) -> Answer {
    let text = text.trim();
    let (word, reason) = match text.split_once([':', '：']) {
        Some((word, reason)) => (word, Some(reason.trim())),
        None => (text, None),
    };
    let word = word
        .trim()
        .trim_end_matches(['.', '!', '。', '！'])
        .to_lowercase();
    let approve = YES.contains(&word.as_str());
    // A reply that is not a yes word is a denial as a whole: its text is
    // not split into a word and a reason unless it begins with a word.
    let reason = match reason {
        Some(reason) if approve || ["no", "n", "否", "不", "拒绝"].contains(&word.as_str()) => {
            Some(reason)
        }
        _ => None,
    };
    Answer {
        approve,
        reason: reason.filter(|r| !r.is_empty()).map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_words_approve_and_everything_else_denies() {
        for yes in [
            "yes", "Yes", "YES", " y ", "confirm", "Confirm!", "是", "是的", "确认", "同意",
            "批准", "yes.",
        ] {
            assert_eq!(
                answer(yes),
                Answer {
                    approve: true,
                    reason: None
                },
                "{yes:?}"
            );
        }
        for no in [
            "no",
            "n",
            "nope",
            "yes please",
            "yess",
            "",
            "ok",
            "否",
            "sure",
        ] {
            assert!(!answer(no).approve, "{no:?}");
        }
        assert_eq!(
            answer("yes: read the diff"),
            Answer {
                approve: true,
                reason: Some("read the diff".to_owned())
            }
        );
        assert_eq!(
            answer("是：看过了"),
            Answer {
                approve: true,
                reason: Some("看过了".to_owned())
            }
        );
        assert_eq!(
            answer("no: wrong file"),
            Answer {
                approve: false,
                reason: Some("wrong file".to_owned())
            }
        );
        assert_eq!(
            answer("maybe: later"),
            Answer {
                approve: false,
                reason: None
            }
        );
        assert_eq!(
            answer("yes:"),
            Answer {
                approve: true,
                reason: None
            }
        );
    }
}
