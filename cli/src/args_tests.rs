use super::*;
use clap::CommandFactory;

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn durations_parse_with_units() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration(" 1s "), Ok(Duration::from_secs(1)));
}

#[test]
fn durations_without_unit_or_zero_are_refused() {
    for bad in ["10", "", "ten seconds", "0s", "-1s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn endpoints_split_on_commas_and_flags_go_anywhere() {
    let cli = Cli::try_parse_from([
        "baton",
        "probe",
        "tasks/a",
        "--endpoints",
        "a:1,http://b:2",
        "--output",
        "json",
        "--timeout",
        "2s",
    ])
    .unwrap();
    assert_eq!(cli.global.endpoints, ["a:1", "http://b:2"]);
    assert_eq!(cli.global.output, OutputFormat::Json);
    assert_eq!(cli.global.retry_timeout(), Duration::from_secs(2));
    assert!(matches!(cli.command, Command::Probe { stale: false, .. }));
}

#[test]
fn claim_defaults_to_a_30s_ttl() {
    let cli = Cli::try_parse_from(["baton", "claim", "k", "--holder", "me"]).unwrap();
    match cli.command {
        Command::Claim { ttl, holder, .. } => {
            assert_eq!(ttl, Duration::from_secs(30));
            assert_eq!(holder.as_deref(), Some("me"));
        }
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn timeout_defaults_to_10s_of_retries_and_30s_of_waiting() {
    let cli = Cli::try_parse_from(["baton", "claim", "k", "--wait"]).unwrap();
    assert_eq!(cli.global.retry_timeout(), Duration::from_secs(10));
    assert_eq!(cli.global.wait_timeout(), Duration::from_secs(30));
    assert!(matches!(cli.command, Command::Claim { wait: true, .. }));
    let cli = Cli::try_parse_from(["baton", "claim", "k", "--wait", "--timeout", "1s"]).unwrap();
    assert_eq!(cli.global.wait_timeout(), Duration::from_secs(1));
    assert_eq!(cli.global.retry_timeout(), Duration::from_secs(1));
}

#[test]
fn run_takes_the_command_after_a_double_dash() {
    let cli = Cli::try_parse_from([
        "baton", "run", "tasks/x", "--ttl", "2s", "--grace", "1s", "--", "sh", "-c", "exit 7",
        "--ttl",
    ])
    .unwrap();
    let Command::Run(run) = cli.command else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!(run.keys, ["tasks/x"]);
    assert_eq!(run.ttl, Duration::from_secs(2));
    assert_eq!(run.grace, Duration::from_secs(1));
    assert!(!run.wait);
    assert_eq!(run.command, ["sh", "-c", "exit 7", "--ttl"]);
    // The command is required.
    let error = Cli::try_parse_from(["baton", "run", "tasks/x"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    // A key or --next, not both, not neither (`run` refuses --where and --any without
    // --next, exit 2: tested in cli/tests/tasks.rs).
    let next = Cli::try_parse_from(["baton", "run", "--next", "q/", "--where", "a=b", "--", "x"]);
    let Command::Run(run) = next.unwrap().command else {
        panic!("not run");
    };
    assert_eq!((run.keys.len(), run.next.as_deref()), (0, Some("q/")));
    assert_eq!(run.wheres, [("a".to_owned(), "b".to_owned())]);
    // Several keys: a set, claimed all or none.
    let set = Cli::try_parse_from(["baton", "run", "a", "b", "--", "x", "y"]).unwrap();
    let Command::Run(run) = set.command else {
        panic!("not run");
    };
    assert_eq!(
        (run.keys, run.command),
        (
            vec!["a".to_owned(), "b".to_owned()],
            vec!["x".to_owned(), "y".to_owned()]
        )
    );
    for argv in [
        &["baton", "run", "k", "--next", "q/", "--", "x"][..],
        &["baton", "run", "--", "x"],
        &["baton", "run", "--next", "q/", "--wait", "--", "x"],
    ] {
        let error = Cli::try_parse_from(argv).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{argv:?}");
    }
}

#[test]
fn every_subcommand_has_examples_in_its_help() {
    let mut cli = Cli::command();
    cli.build();
    let mut missing = Vec::new();
    let mut check = |name: String, help: Option<String>| {
        if !help.is_some_and(|h| h.starts_with("Examples:")) {
            missing.push(name);
        }
    };
    check("baton".into(), cli.get_after_help().map(|h| h.to_string()));
    for sub in cli.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        if sub.has_subcommands() {
            for nested in sub.get_subcommands().filter(|c| c.get_name() != "help") {
                check(
                    format!("{} {}", sub.get_name(), nested.get_name()),
                    nested.get_after_help().map(|h| h.to_string()),
                );
            }
        }
        check(
            sub.get_name().to_owned(),
            sub.get_after_help().map(|h| h.to_string()),
        );
    }
    assert!(missing.is_empty(), "no Examples: block in {missing:?}");
}

#[test]
fn facts_parse_as_name_claimed_value_and_command() {
    let fact = parse_fact("rows_left=4::wc -l < todo.txt").unwrap();
    assert_eq!(
        (
            fact.name.as_str(),
            fact.claimed_value.as_str(),
            fact.check_command.as_str()
        ),
        ("rows_left", "4", "wc -l < todo.txt")
    );
    // The command may contain '=' and '::'; the claimed value may be empty.
    let fact = parse_fact("sep=::awk -F:: '{print $1}' f=x").unwrap();
    assert_eq!(fact.claimed_value, "");
    assert_eq!(fact.check_command, "awk -F:: '{print $1}' f=x");
    let fact = parse_fact(" count = 4 :: echo 5 ").unwrap();
    assert_eq!(
        (fact.name.as_str(), fact.claimed_value.as_str()),
        ("count", "4")
    );
    assert_eq!(fact.check_command, "echo 5");
}

#[test]
fn facts_without_name_or_command_are_usage_errors() {
    for bad in ["count", "=4::echo 4", "count=4::", "count=4::  ", "count=4"] {
        assert!(parse_fact(bad).is_err(), "{bad:?}");
    }
    let argv = [
        "baton", "handoff", "offer", "k", "--token", "1", "--to", "b", "--fact", "x=1",
    ];
    assert_eq!(Cli::try_parse_from(argv).unwrap_err().exit_code(), 2);
}

#[test]
fn fields_parse_at_the_first_equals_sign() {
    assert_eq!(parse_field("pr=482"), Ok(("pr".into(), "482".into())));
    assert_eq!(parse_field("url=a=b"), Ok(("url".into(), "a=b".into())));
    assert_eq!(parse_field("empty="), Ok(("empty".into(), String::new())));
    assert!(parse_field("=x").is_err());
    assert!(parse_field("novalue").is_err());
}

#[test]
fn update_collects_repeated_set_and_unset() {
    let cli = Cli::try_parse_from([
        "baton", "update", "tasks/x", "--token", "9", "--status", "done", "--set", "pr=1", "--set",
        "n=2", "--unset", "tmp",
    ])
    .unwrap();
    let Command::Update {
        token,
        status,
        summary,
        set,
        unset,
        ..
    } = cli.command
    else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!(token, 9);
    assert_eq!(status.as_deref(), Some("done"));
    assert_eq!(summary, None);
    assert_eq!(set, [("pr".into(), "1".into()), ("n".into(), "2".into())]);
    assert_eq!(unset, ["tmp"]);
}

#[test]
fn handoff_defaults_a_10m_offer_and_a_30s_lease_for_the_taker() {
    let cli = Cli::try_parse_from([
        "baton", "handoff", "offer", "k", "--token", "3", "--to", "bob", "--git",
    ])
    .unwrap();
    let Command::Handoff {
        command: HandoffCommand::Offer(offer),
    } = cli.command
    else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!(offer.ttl, Duration::from_secs(600));
    assert!(offer.git);
    let cli = Cli::try_parse_from([
        "baton", "handoff", "accept", "k", "--holder", "bob", "--verify",
    ])
    .unwrap();
    let Command::Handoff {
        command:
            HandoffCommand::Accept {
                ttl,
                verify,
                holder,
                ..
            },
    } = cli.command
    else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!(ttl, Duration::from_secs(30));
    assert!(verify);
    assert_eq!(holder.as_deref(), Some("bob"));
    // Cancel needs the giver's token; offer needs an addressee.
    for argv in [
        &["baton", "handoff", "cancel", "k"][..],
        &["baton", "handoff", "offer", "k", "--token", "3"][..],
    ] {
        assert_eq!(Cli::try_parse_from(argv).unwrap_err().exit_code(), 2);
    }
}

#[test]
fn release_takes_an_optional_final_status() {
    let cli =
        Cli::try_parse_from(["baton", "release", "k", "--token", "3", "--status", "done"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Release { status: Some(ref s), .. } if s == "done"
    ));
}

#[test]
fn watch_takes_an_optional_prefix_and_starting_revision() {
    let cli = Cli::try_parse_from(["baton", "watch"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Watch { ref prefix, from: 0 } if prefix.is_empty()
    ));
    let cli = Cli::try_parse_from(["baton", "watch", "tasks/", "--from", "1207"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Watch { ref prefix, from: 1207 } if prefix == "tasks/"
    ));
    let error = Cli::try_parse_from(["baton", "watch", "--from", "-1"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
}

#[test]
fn bench_has_defaults_and_takes_a_zero_warmup() {
    let cli = Cli::try_parse_from(["baton", "bench"]).unwrap();
    let Command::Bench(bench) = cli.command else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!((bench.clients, bench.keys), (16, 1000));
    assert_eq!(bench.duration, Duration::from_secs(10));
    assert_eq!(bench.warmup, Duration::from_secs(2));
    assert_eq!(bench.ttl, Duration::from_secs(10));
    assert_eq!(bench.prefix, "bench/");
    let cli = Cli::try_parse_from([
        "baton",
        "bench",
        "--clients",
        "4",
        "--keys",
        "8",
        "--duration",
        "1500ms",
        "--warmup",
        "0s",
        "--ttl",
        "5s",
        "--prefix",
        "b/",
    ])
    .unwrap();
    let Command::Bench(bench) = cli.command else {
        panic!("parsed as {:?}", cli.command);
    };
    assert_eq!((bench.clients, bench.keys), (4, 8));
    assert_eq!(bench.duration, Duration::from_millis(1500));
    assert_eq!(bench.warmup, Duration::ZERO);
    assert_eq!(
        (bench.ttl, bench.prefix.as_str()),
        (Duration::from_secs(5), "b/")
    );
    // A zero duration is a usage error; so is a negative count.
    for argv in [
        &["baton", "bench", "--duration", "0s"][..],
        &["baton", "bench", "--clients", "-1"][..],
    ] {
        assert_eq!(Cli::try_parse_from(argv).unwrap_err().exit_code(), 2);
    }
}

#[test]
fn renew_without_token_is_a_usage_error() {
    let error = Cli::try_parse_from(["baton", "renew", "k"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
}

#[test]
fn default_holder_fits_the_holder_limit() {
    let holder = default_holder();
    assert!(holder.contains('@'));
    assert!(!holder.is_empty() && holder.len() <= HOLDER_NAME_BYTES_MAX);
}

#[test]
fn truncation_respects_char_boundaries() {
    assert_eq!(truncate_to_bytes("ééé".into(), 3), "é");
    assert_eq!(truncate_to_bytes("abc".into(), 5), "abc");
}

#[test]
fn mcp_defaults_are_left_to_the_named_constants() {
    let cli = Cli::try_parse_from(["baton", "mcp"]).unwrap();
    let Command::Mcp(args) = cli.command else {
        panic!("not mcp: {:?}", cli.command)
    };
    assert_eq!(args.idle, None, "mcp::IDLE_DEFAULT applies");
    assert_eq!(args.ttl, None, "mcp::TTL_DEFAULT applies");
    assert!(!args.operator);
}

#[test]
fn hook_check_takes_staged_or_paths_but_not_both_nor_neither() {
    let cli = Cli::try_parse_from(["baton", "hook", "check", "--staged"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Hook {
            command: HookCommand::Check { staged: true, .. }
        }
    ));
    assert!(Cli::try_parse_from(["baton", "hook", "check"]).is_err());
    assert!(Cli::try_parse_from(["baton", "hook", "check", "--staged", "a.md"]).is_err());
}

#[test]
fn the_hooks_old_name_guard_still_works_for_this_release() {
    // Hooks written by `baton guard install` run `baton guard check --staged`.
    let cli = Cli::try_parse_from(["baton", "guard", "check", "--staged"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Hook {
            command: HookCommand::Check { staged: true, .. }
        }
    ));
}

#[test]
fn every_positional_argument_says_what_it_is() {
    fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_positionals() {
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} <{}>", arg.get_id()));
            }
        }
        for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "baton", &mut missing);
    assert!(missing.is_empty(), "no help for {missing:?}");
}

#[test]
fn quarantine_takes_zero_to_remove_a_rule() {
    let cli = Cli::try_parse_from(["baton", "quarantine", "printers/", "--delay", "0s"]).unwrap();
    assert!(
        matches!(cli.command, Command::Quarantine { delay: Some(delay), .. } if delay.is_zero())
    );
    let list = Cli::try_parse_from(["baton", "quarantine"]).unwrap();
    assert!(matches!(
        list.command,
        Command::Quarantine {
            prefix: None,
            delay: None
        }
    ));
    assert!(Cli::try_parse_from(["baton", "quarantine", "printers/"]).is_err());
}

#[test]
fn completions_name_the_shell() {
    let cli = Cli::try_parse_from(["baton", "completions", "bash"]).unwrap();
    assert!(matches!(
        cli.command,
        Command::Completions {
            shell: clap_complete::Shell::Bash
        }
    ));
    assert!(Cli::try_parse_from(["baton", "completions", "tcsh"]).is_err());
}
