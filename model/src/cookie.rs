//! Reading one cookie out of a request's `Cookie` header: what the pages
//! drawn on the server need (the theme, a refused sign-in) before any
//! middleware parses cookies for them.

/// The value of cookie `name` in a `Cookie` header, if it is there.
pub fn cookie_value<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    header.split(';').filter_map(|pair| pair.trim().split_once('=')).find(|(n, _)| *n == name).map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_named_cookie_and_no_other() {
        let header = "a=1; gatehouse_sign_in=x=y; xgatehouse_sign_in=2";
        assert_eq!(cookie_value(header, "gatehouse_sign_in"), Some("x=y"));
        assert_eq!(cookie_value(header, "a"), Some("1"));
        assert_eq!(cookie_value(header, "sign_in"), None);
        assert_eq!(cookie_value("", "a"), None);
    }
}
