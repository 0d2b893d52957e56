//! The console's colours as the person chose them in the header: the
//! system's, or light or dark whatever the system says. Kept in a cookie,
//! so the page is drawn in it from the first byte.

use serde::{Deserialize, Serialize};

/// The cookie the choice is kept in (not a secret, readable by scripts).
pub const THEME_COOKIE: &str = "gatehouse_theme";

/// A colour theme.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Theme {
    /// Follow the system (the default).
    #[default]
    System,
    /// Always light.
    Light,
    /// Always dark.
    Dark,
}

impl Theme {
    /// Every theme, in the order the header offers them.
    pub const ALL: [Theme; 3] = [Theme::System, Theme::Light, Theme::Dark];

    /// Its name in the cookie and in `data-theme`.
    pub fn as_str(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    /// As people read it in the header.
    pub fn label(self) -> &'static str {
        match self {
            Theme::System => "System",
            Theme::Light => "Light",
            Theme::Dark => "Dark",
        }
    }

    /// The theme named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The theme a `Cookie` header carries (the system's when none or a
    /// value no theme has).
    pub fn from_cookie_header(header: &str) -> Self {
        crate::cookie_value(header, THEME_COOKIE).and_then(Self::parse).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cookie_and_nothing_else() {
        assert_eq!(Theme::from_cookie_header("a=b; gatehouse_theme=dark"), Theme::Dark);
        assert_eq!(Theme::from_cookie_header("gatehouse_theme=purple"), Theme::System);
        assert_eq!(Theme::from_cookie_header(""), Theme::System);
    }
}
