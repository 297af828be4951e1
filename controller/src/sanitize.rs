//! Text from a revision, a spec or a sandbox made safe for where it goes. [`terminal`] is for
//! the operator's terminal (live output, `sandbench logs`, `sandbench phase`, errors): escape
//! sequences and control characters are removed, so a workload can neither recolour, move the
//! cursor, retitle the window, rewrite what was printed (`\r`, backspace) nor reorder text
//! (bidirectional overrides). The Markdown and HTML escapers (`report::format::escape`,
//! `report::html`) start from it. [`prefix`] cuts a string on a character boundary, so a
//! revision or commit of any script can be shortened without panicking.

use std::borrow::Cow;

const ESC: char = '\u{1b}';
const BEL: char = '\u{07}';
/// The 8-bit String Terminator.
const ST: char = '\u{9c}';

/// Whether `c` can hide, move or restyle text on a terminal: C0 controls but newline and tab,
/// DEL, C1 controls, and the bidirectional embeddings, overrides and isolates.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `text` with every escape sequence (CSI, OSC, DCS, SOS, PM, APC, and two-character ESC
/// sequences, in their 7-bit and 8-bit forms) and every other control character removed, but
/// newlines and tabs. Borrowed when there was nothing to remove.
pub fn terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ESC => match chars.peek().copied() {
                Some('[') => {
                    chars.next();
                    skip_csi(&mut chars);
                }
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    skip_string(&mut chars);
                }
                // nF sequences: intermediates, then one final byte.
                Some(' '..='/') => {
                    while chars.next_if(|c| (' '..='/').contains(c)).is_some() {}
                    chars.next_if(|c| ('0'..='~').contains(c));
                }
                // Fp, Fe and Fs sequences: ESC and one character.
                Some('0'..='~') => {
                    chars.next();
                }
                // A lone ESC: dropped, what follows is text.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if unsafe_char(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The rest of a control sequence: parameters, intermediates, then the final byte. Stops early
/// at anything else, which is then read as text again.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if(|c| ('0'..='?').contains(c)).is_some() {}
    while chars.next_if(|c| (' '..='/').contains(c)).is_some() {}
    chars.next_if(|c| ('@'..='~').contains(c));
}

/// The rest of a control string (OSC, DCS, …): up to and including BEL, ST or ESC `\`; an
/// unterminated one runs to the end of the text.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            BEL | ST => return,
            ESC => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

/// The first `n` characters of `text` (all of it when shorter): a short commit id, or a revision
/// name of any script.
pub fn prefix(text: &str, n: usize) -> &str {
    text.char_indices().nth(n).map_or(text, |(at, _)| &text[..at])
}

/// `text` cut to at most `max` bytes on a character boundary, saying how much was cut.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{} … [{} more bytes not kept]", &text[..end], text.len() - end))
}

/// JSON text (as serde writes it) with every character [`terminal`] would remove written as a
/// `\uXXXX` escape instead: the same JSON value, lossless, and inert when printed. serde escapes
/// C0 controls itself but writes DEL, C1 controls and bidirectional overrides raw. Outside
/// strings JSON text is ASCII without controls, so every such character is inside a string.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| unsafe_char(c) && c != '\n' && c != '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_what_a_terminal_would_obey_and_keeps_the_value() {
        let value = serde_json::json!({"unit": "ms\u{9b}31m\u{202e}\u{7f}", "plain": "é\n\t"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = json(&text);
        assert!(!safe.chars().any(|c| unsafe_char(c) && c != '\n'), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), value);
        assert!(safe.contains("\\u009b") && safe.contains("\\u202e") && safe.contains("\\u007f"), "{safe}");
        assert!(matches!(json("{\n  \"a\": 1\n}"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_sequences_and_controls_are_removed() {
        let cases = [
            ("plain text\n\twith tab", "plain text\n\twith tab"),
            ("\u{1b}[31mred\u{1b}[0m", "red"),
            ("\u{1b}[2J\u{1b}[1;1Hwiped", "wiped"),
            ("\u{1b}]0;owned title\u{7}after", "after"),
            ("\u{1b}]8;;http://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\", "link"),
            ("\u{1b}P1$tx\u{1b}\\dcs", "dcs"),
            ("\u{1b}(Bcharset", "charset"),
            ("\u{1b}7\u{1b}8saved", "saved"),
            ("over\rwrite\u{8}\u{8}", "overwrite"),
            ("\u{9b}31mc1 csi", "c1 csi"),
            ("\u{9d}0;title\u{9c}c1 osc", "c1 osc"),
            ("abc\u{202e}txt.exe", "abctxt.exe"),
            ("nul\0bell\u{7}del\u{7f}", "nulbelldel"),
            ("unterminated \u{1b}]0;title", "unterminated "),
            ("trailing \u{1b}", "trailing "),
            ("\u{1b}[", ""),
            ("é ü 漢字 ✓", "é ü 漢字 ✓"),
        ];
        for (input, expected) in cases {
            assert_eq!(terminal(input), expected, "{input:?}");
        }
        assert!(matches!(terminal("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn prefixes_never_split_a_character() {
        assert_eq!(prefix("aéééé", 8), "aéééé");
        assert_eq!(prefix("aéééééééééé", 8), "aééééééé");
        assert_eq!(prefix("0123456789abcdef", 8), "01234567");
        assert_eq!(prefix("", 8), "");
        assert_eq!(bounded("aéé", 2), "a … [4 more bytes not kept]");
        assert_eq!(bounded("short", 10), "short");
    }
}
