//! A person's words on a decision: the reason for a decline (which the
//! agent receives) and the note on an approval (audited).

/// Longest reason or note, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// Why a reason or note was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoteError {
    /// Longer than [`MAX_NOTE_CHARS`].
    TooLong,
    /// Holds a control character other than a line break or tab.
    ControlCharacter,
}

impl std::fmt::Display for NoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoteError::TooLong => write!(f, "a reason is at most {MAX_NOTE_CHARS} characters"),
            NoteError::ControlCharacter => f.write_str("a reason may not hold control characters"),
        }
    }
}

impl std::error::Error for NoteError {}

/// A reason or note as stored: trimmed, line breaks and tabs made spaces
/// (it is one line in the audit log and the agent's result), `None` when
/// empty; other control characters and more than [`MAX_NOTE_CHARS`] are refused.
pub fn clean_note(text: &str) -> Result<Option<String>, NoteError> {
    let text = text.trim();
    if text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        return Err(NoteError::ControlCharacter);
    }
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() > MAX_NOTE_CHARS {
        return Err(NoteError::TooLong);
    }
    Ok(Some(one_line).filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_trimmed_one_line_and_bounded() {
        assert_eq!(clean_note("  "), Ok(None));
        assert_eq!(clean_note(" use /tmp\r\ninstead "), Ok(Some("use /tmp  instead".into())));
        assert_eq!(clean_note("a\u{7}b"), Err(NoteError::ControlCharacter));
        assert_eq!(clean_note(&"x".repeat(500)).unwrap().unwrap().len(), 500);
        assert_eq!(clean_note(&"x".repeat(501)), Err(NoteError::TooLong));
    }
}
