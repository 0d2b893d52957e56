//! Makes invisible and direction-changing characters visible, so a crafted
//! argument cannot hide what is being approved.

/// A run of ordinary text, or one character shown by its code point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Shown as is.
    Text(String),
    /// Shown as `U+XXXX` (control, bidi, zero-width or other invisible character).
    Hidden(char),
}

/// Whether `c` would be invisible or would reorder the text around it.
pub fn is_hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}

/// Splits `text` into visible runs and hidden characters.
pub fn reveal(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut run = String::new();
    for c in text.chars() {
        if is_hidden(c) {
            if !run.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut run)));
            }
            pieces.push(Piece::Hidden(c));
        } else {
            run.push(c);
        }
    }
    if !run.is_empty() {
        pieces.push(Piece::Text(run));
    }
    pieces
}

/// `U+202E`
pub fn code_point(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_and_zero_width_characters_are_pulled_out() {
        let pieces = reveal("rm \u{202E}fdp.exe\u{200B}!");
        assert_eq!(
            pieces,
            vec![
                Piece::Text("rm ".into()),
                Piece::Hidden('\u{202E}'),
                Piece::Text("fdp.exe".into()),
                Piece::Hidden('\u{200B}'),
                Piece::Text("!".into()),
            ]
        );
        assert_eq!(code_point('\u{202E}'), "U+202E");
        assert_eq!(reveal("plain\ntext"), vec![Piece::Text("plain\ntext".into())]);
        assert!(is_hidden('\u{E0041}'), "tag characters");
    }
}
