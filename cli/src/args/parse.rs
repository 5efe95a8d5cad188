//! Reading the command line into [`Cli`], with two corrections to clap's defaults.

use clap::{CommandFactory, FromArgMatches};

use super::Cli;

/// Parses the command line; clap prints usage errors itself and exits with 2.
///
/// - An option whose environment variable is set but empty (`BATON_TLS_CA=`) is read as
///   unset, as shells and most tools mean it, instead of "a value is required".
/// - A usage error's `Usage:` line is the command's plain one (`baton probe [OPTIONS]
///   <KEY>`): clap's would list the options given, `baton probe --endpoints <ENDPOINTS>
///   <KEY>`, which reads as if `--endpoints` were required.
pub fn parse() -> Cli {
    let command = plain_usages(empty_env_is_unset(Cli::command(), |name| {
        std::env::var_os(name).is_some_and(|value| value.is_empty())
    }));
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

/// `command` with the environment variable dropped from every argument whose variable
/// `is_empty` says is set to nothing, in every subcommand.
pub(crate) fn empty_env_is_unset(
    mut command: clap::Command,
    is_empty: impl Fn(&std::ffi::OsStr) -> bool + Copy,
) -> clap::Command {
    let empty: Vec<clap::Id> = command
        .get_arguments()
        .filter(|arg| arg.get_env().is_some_and(is_empty))
        .map(|arg| arg.get_id().clone())
        .collect();
    for id in empty {
        command = command.mut_arg(id, |arg| arg.env(None));
    }
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |sub| empty_env_is_unset(sub, is_empty));
    }
    command
}

/// `command` with every (sub)command's usage fixed to its plain form.
pub(crate) fn plain_usages(mut command: clap::Command) -> clap::Command {
    command.build();
    fix_usage(command)
}

fn fix_usage(mut command: clap::Command) -> clap::Command {
    let usage = command.render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_owned();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, fix_usage);
    }
    command.override_usage(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_error(args: &[&str]) -> String {
        let command = plain_usages(Cli::command());
        let error = command.try_get_matches_from(args).unwrap_err();
        error.render().to_string()
    }

    #[test]
    fn a_usage_error_shows_the_plain_usage_not_the_options_given() {
        let text = usage_error(&["baton", "probe", "--endpoints", "a:1"]);
        assert!(
            text.contains("Usage: baton probe [OPTIONS] <KEY>\n"),
            "{text}"
        );
        assert!(!text.contains("<ENDPOINTS>"), "{text}");
        let text = usage_error(&["baton", "claim", "x", "--endpoints", "a:1", "--bogus"]);
        assert!(
            text.contains("Usage: baton claim [OPTIONS] <KEY>...\n"),
            "{text}"
        );
        let text = usage_error(&["baton", "cluster", "status", "--endpoints", "a:1", "x"]);
        assert!(
            text.contains("Usage: baton cluster status [OPTIONS]\n"),
            "{text}"
        );
    }
}
