//! The unit tests of the configuration: the file, the flags, the checks.

use std::path::Path;
use std::time::Duration;

use super::*;

#[test]
fn notify_tables_are_read_and_checked_with_the_rest() {
    let path = Path::new("gatehouse.toml");
    let text = "[[notify]]\nurl = \"https://hooks.example/x\"\nformat = \"ntfy\"\ntools = [\"files__*\"]\n";
    let config = Config::resolve(FileConfig::parse(path, text).unwrap(), &Overrides::default()).unwrap();
    assert_eq!(config.notify_targets.len(), 1);
    assert_eq!(config.notify_targets[0].format, crate::notify::Format::Ntfy);
    let bad = "[[notify]]\nurl = \"https://hooks.example/x\"\nagents = [\"*a*\"]\n";
    let e = Config::resolve(FileConfig::parse(path, bad).unwrap(), &Overrides::default()).unwrap_err();
    assert!(e.to_string().starts_with("notify[0].agents"), "{e}");
    let unknown = FileConfig::parse(path, "[[notify]]\nurl = \"https://h.example\"\nsecrets = \"x\"\n");
    assert!(unknown.unwrap_err().to_string().contains("secrets"));
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_and_line() {
    let err =
        FileConfig::parse(Path::new("g.toml"), "listen = \"127.0.0.1:9\"\nlisten_port = 3\n").unwrap_err().to_string();
    assert!(err.contains("line 2") && err.contains("listen_port"), "{err}");
    let err = FileConfig::parse(Path::new("g.toml"), "\napproval_ttl = \"soon\"\n").unwrap_err().to_string();
    assert!(err.contains("line 2") && err.contains("approval_ttl"), "{err}");
}

#[test]
fn flags_win_over_file_values_and_defaults_fill_the_rest() {
    let file =
        FileConfig::parse(Path::new("g.toml"), "listen = \"127.0.0.1:9000\"\nliveness_window = \"2h\"\n").unwrap();
    let overrides = Overrides { listen: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
    let config = Config::resolve(file, &overrides).unwrap();
    assert_eq!(config.listen.port(), 0);
    assert_eq!(config.liveness_window, Duration::from_secs(7200));
    assert_eq!(config.approval_ttl, Duration::from_secs(600));
}

#[test]
fn policy_rules_are_checked() {
    let file =
        FileConfig::parse(Path::new("g.toml"), "[[policy]]\npattern = \"files__*\"\naction = \"allow\"\n").unwrap();
    assert_eq!(Config::resolve(file, &Overrides::default()).unwrap().policy_rules.len(), 1);
    // The rule contract's own types refuse it where it is written: line and column.
    let err = FileConfig::parse(Path::new("g.toml"), "[[policy]]\npattern = \"x\"\naction = \"maybe\"\n").unwrap_err();
    assert!(err.to_string().contains("line 3") && err.to_string().contains("`maybe`"), "{err}");
}

#[test]
fn tool_profiles_are_read_and_checked() {
    let resolve = |toml: &str| {
        Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).map_err(|e| e.to_string())?, &Overrides::default())
            .map_err(|e| e.to_string())
    };
    let ok =
        resolve("[[profile]]\nname = \"docs only\"\nowners = [\"bob\"]\ntools = [\"docs__*\"]\nrate = \"100/hour\"\n")
            .unwrap();
    assert_eq!(ok.profiles[0].source, gatehouse_core::policy::Source::Config);
    assert_eq!(ok.profiles[0].rate.map(|r| r.to_string()).as_deref(), Some("100/hour"));
    let err = resolve("[[profile]]\nname = \"p\"\ntools = [\"*\"]\n").unwrap_err();
    assert!(err.contains("profile[0].agents") && err.contains(r#"profile "p""#), "{err}");
    let err = resolve("[[profile]]\nname = \"p\"\nowners = [\"a\"]\ntool = [\"*\"]\n").unwrap_err();
    assert!(err.contains("tool"), "an unknown key: {err}");
    let twice = "[[profile]]\nname = \"p\"\nowners = [\"a\"]\n";
    let err = resolve(&format!("{twice}{twice}")).unwrap_err();
    assert!(err.contains("profile[1].name"), "{err}");
}

#[test]
fn conditional_rules_are_read_and_a_broken_condition_stops_the_start() {
    let resolve = |toml: &str| {
        Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default())
            .map_err(|e| e.to_string())
    };
    let ok = resolve(
        "[[policy]]\nname = \"no push to main\"\npattern = \"git__push\"\naction = \"block\"\n\
         agents = [\"cursor\"]\nowners = [\"alice\"]\nupstreams = [\"git\"]\nwhen = 'args.branch == \"main\"'\n",
    )
    .unwrap();
    let rule = &ok.policy_rules[0];
    assert_eq!((rule.name.as_str(), rule.when.as_deref()), ("no push to main", Some(r#"args.branch == "main""#)));
    assert_eq!((rule.agents.len(), rule.owners.len(), rule.upstreams.len()), (1, 1, 1));
    let err =
        resolve("[[policy]]\nname = \"r\"\npattern = \"x\"\naction = \"block\"\nwhen = \"args.a >\"\n").unwrap_err();
    assert!(err.contains("policy[0].when") && err.contains(r#"rule "r""#) && err.contains("line 1, column"), "{err}");
    let err = resolve("[[policy]]\npattern = \"x\"\naction = \"block\"\nagents = [\"a*b*\"]\n").unwrap_err();
    assert!(err.contains("policy[0].agents"), "{err}");
}

#[test]
fn upstream_tls_and_paging_settings_are_checked() {
    let resolve = |toml: &str| {
        Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default())
            .map_err(|e| e.to_string())
    };
    let ok = resolve("[[upstream]]\nname = \"a\"\nurl = \"https://x/mcp\"\nca_file = \"/ca.pem\"\n").unwrap();
    assert_eq!(ok.upstream[0].ca_file.as_deref(), Some(Path::new("/ca.pem")));
    let plain = resolve("[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\nca_file = \"/ca.pem\"\n");
    assert!(plain.unwrap_err().contains("ca_file needs an https url"));
    let ws = resolve("[[upstream]]\nname = \"a\"\nurl = \"ws://x/mcp\"\n");
    assert!(ws.unwrap_err().contains("http or https"));
    assert!(resolve("list_page_size = 0\n").unwrap_err().contains("list_page_size"));
    assert!(resolve("max_sessions = 0\n").unwrap_err().contains("max_sessions"));
    assert_eq!(resolve("").unwrap().session_idle_timeout, Duration::from_secs(300));
    assert_eq!(resolve("session_idle_timeout = \"90s\"\n").unwrap().session_idle_timeout, Duration::from_secs(90));
    let limits = resolve("run_window = \"1m\"\ntrust_client_forms = true\nmax_connections = 3\n").unwrap();
    assert_eq!(
        (limits.run_window, limits.trust_client_forms, limits.max_connections),
        (Duration::from_secs(60), true, 3)
    );
    let per_rule =
        resolve("[[policy]]\npattern = \"x\"\naction = \"require_approval\"\napproval_ttl = \"30m\"\n").unwrap();
    assert_eq!(per_rule.policy_rules[0].approval_ttl, Some(Duration::from_secs(1800)));
    let err =
        resolve("[[policy]]\npattern = \"x\"\naction = \"require_approval\"\napproval_ttl = \"30d\"\n").unwrap_err();
    assert!(err.to_string().contains("policy[0].approval_ttl"), "{err}");
    assert!(resolve("approval_ttl = \"8d\"\n").unwrap_err().to_string().contains("approval_ttl"));
    let clamped = resolve("approval_ttl = \"2m\"\nrun_window = \"9m\"\n").unwrap().settings();
    assert_eq!(clamped.run_window, Duration::from_secs(120), "never longer than the approval TTL");
    assert_eq!(resolve("list_page_size = 7\n").unwrap().list_page_size, 7);
}

#[test]
fn upstream_limits_have_defaults_and_are_checked() {
    let resolve = |toml: &str| {
        Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default())
            .map_err(|e| e.to_string())
    };
    let plain = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    let defaults = UpstreamConfig { name: "a".into(), command: Some("x".into()), ..UpstreamConfig::default() };
    assert_eq!(plain.upstream[0], defaults);
    let set = resolve(
        "[[upstream]]\nname = \"a\"\ncommand = \"x\"\ncall_timeout = \"2s\"\nmax_list_pages = 3\ninherit_env = [\"HTTPS_PROXY\"]\n",
    )
    .unwrap();
    assert_eq!(set.upstream[0].call_timeout, Duration::from_secs(2));
    assert_eq!(set.upstream[0].max_list_pages, 3);
    assert!(plain.upstream[0].pin_tools, "pinning is on unless turned off");
    let unpinned = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\npin_tools = false\n").unwrap();
    assert!(!unpinned.upstream[0].pin_tools);
    let zero = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nmax_list_pages = 0\n");
    assert!(zero.unwrap_err().contains("max_list_pages must be at least 1"));
    let bad = FileConfig::parse(Path::new("g.toml"), "[[upstream]]\nname = \"a\"\nlist_timeout = \"soon\"\n");
    assert!(bad.unwrap_err().to_string().contains("list_timeout"));
    let env = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\ninherit_env = [\"A=B\"]\n");
    assert!(env.unwrap_err().contains("inherit_env"));
}

#[test]
fn audit_retention_and_metrics_listener() {
    let resolve = |toml: &str| {
        Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default()).unwrap()
    };
    let d = resolve("");
    assert_eq!(d.audit_retention, Duration::from_secs(90 * 24 * 3600));
    assert_eq!(d.metrics_listen, None);
    let c = resolve("audit_retention = \"30d\"\nmetrics_listen = \"127.0.0.1:9464\"\n");
    assert_eq!(c.audit_retention, Duration::from_secs(30 * 24 * 3600));
    assert_eq!(c.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    let err = FileConfig::parse(Path::new("g.toml"), "audit_retention = \"0s\"\n").unwrap_err().to_string();
    assert!(err.contains("audit_retention"), "{err}");
    let flag = Overrides { metrics_listen: Some("127.0.0.1:1".parse().unwrap()), ..Default::default() };
    let file = FileConfig::parse(Path::new("g.toml"), "metrics_listen = \"127.0.0.1:2\"\n").unwrap();
    assert_eq!(Config::resolve(file, &flag).unwrap().metrics_listen.unwrap().port(), 1);
}

#[test]
fn trusted_proxies_registration_and_per_user_bounds() {
    let resolve =
        |toml: &str| Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default());
    let d = resolve("").unwrap();
    assert!(d.proxy_networks.is_empty());
    assert_eq!(d.oauth.unused_registration_ttl, Duration::from_secs(600));
    assert_eq!(d.oauth.max_unused_registrations_per_address, 20);
    let per_user = d.settings().per_user;
    assert_eq!(
        (per_user.credentials, per_user.browser_sessions, per_user.oauth_clients, per_user.grants),
        (100, 50, 50, 500)
    );
    let c = resolve(
        "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nmax_grants_per_user = 7\n\
         [oauth]\nunused_registration_ttl = \"2m\"\nmax_unused_registrations_per_address = 3\n",
    )
    .unwrap();
    assert_eq!(c.proxy_networks.len(), 2);
    assert_eq!(c.settings().per_user.grants, 7);
    assert_eq!(c.settings().oauth.registration.per_address, 3);
    assert_eq!(c.settings().oauth.registration.unused_ttl, Duration::from_secs(120));
    let err = resolve("trusted_proxies = [\"proxy.internal\"]\n").unwrap_err().to_string();
    assert!(err.contains("trusted_proxies[0]"), "{err}");
    let err = resolve("max_credentials_per_user = 0\n").unwrap_err().to_string();
    assert!(err.contains("max_credentials_per_user"), "{err}");
}

#[test]
fn public_url_must_be_http() {
    let file = FileConfig::parse(Path::new("g.toml"), "public_url = \"ftp://x\"\n").unwrap();
    assert!(Config::resolve(file, &Overrides::default()).unwrap_err().to_string().contains("public_url"));
}
