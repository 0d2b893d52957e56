//! Makes invisible and direction-changing characters visible, so a crafted
//! argument or name (of a tool, agent, upstream, client or owner) cannot hide
//! or disguise what is being approved.

/// A run of ordinary text, or one character shown by its code point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Shown as is.
    Text(String),
    /// Shown as `U+XXXX` (control, bidi, zero-width or other invisible character).
    Hidden(char),
}

/// Whether `c` would be invisible or would reorder the text around it:
/// controls (but newline and tab), every format character (Unicode category
/// Cf: bidi embeddings, overrides and isolates, zero-width characters, tags,
/// …), every Default_Ignorable_Code_Point (variation selectors, Hangul
/// fillers, …) and the line and paragraph separators (Unicode 16 tables).
pub fn is_hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
            | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{115F}'..='\u{1160}' | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
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

/// `text` with each hidden character written as `⟨U+XXXX⟩`, for places that
/// take plain text only (the page title, attributes).
pub fn visible(text: &str) -> String {
    reveal(text)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(t) => t,
            Piece::Hidden(c) => format!("⟨{}⟩", code_point(c)),
        })
        .collect()
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

    #[test]
    fn format_and_default_ignorable_characters_are_hidden() {
        let hidden = [
            ('\u{200B}', "zero width space"),
            ('\u{200E}', "left-to-right mark"),
            ('\u{202E}', "right-to-left override"),
            ('\u{2066}', "left-to-right isolate"),
            ('\u{FEFF}', "byte order mark"),
            ('\u{180E}', "Mongolian vowel separator"),
            ('\u{E0001}', "language tag"),
            ('\u{115F}', "Hangul choseong filler"),
            ('\u{3164}', "Hangul filler"),
            ('\u{FE0F}', "variation selector 16"),
            ('\u{00AD}', "soft hyphen"),
            ('\u{061C}', "Arabic letter mark"),
            ('\u{2065}', "unassigned, default ignorable"),
            ('\u{13430}', "Egyptian hieroglyph format"),
            ('\u{1D173}', "musical symbol format"),
            ('\u{E01EF}', "variation selector 256"),
            ('\u{2028}', "line separator"),
            ('\u{0007}', "bell"),
            ('\u{0085}', "next line"),
        ];
        for (c, name) in hidden {
            assert!(is_hidden(c), "{name} {}", code_point(c));
        }
        for c in ['a', ' ', '\n', '\t', 'é', 'ß', 'א', '中', '😀', '\u{00A0}', '\u{2003}'] {
            assert!(!is_hidden(c), "{c:?} is visible");
        }
        assert_eq!(visible("files\u{202E}txt.exe"), "files⟨U+202E⟩txt.exe");
    }
}
