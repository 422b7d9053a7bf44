# The scripts' command lines, one way for all (as dev/dev_cli.h is for the dev programs): --help or -h
# as the first argument prints the script's header comment, which holds its usage, and exits 0; an
# option a script does not take is refused by name before anything runs.
# In a script: source "$(dirname "$0")/<path to>/scripts/cli.sh"; cli_help "$0" "$@"

# cli_help SCRIPT ARG...: the header (the comment lines after the #! line) where ARG 1 asks for help
cli_help() {
    local script=$1
    case "${2:-}" in
    -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$script"; exit 0 ;;
    esac
}

# cli_positional NAME ARG...: for a script whose arguments are all positional, the refusal of one that
# looks like an option
cli_positional() {
    local name=$1 a; shift
    for a in "$@"; do
        case "$a" in -?*) echo "$name: unknown option $a (--help for the usage)" >&2; exit 1 ;; esac
    done
}

# cli_need NAME MIN USAGE ARG...: the refusal of fewer than MIN positional arguments, with the usage
cli_need() {
    local name=$1 min=$2 usage=$3; shift 3
    [ $# -ge "$min" ] && return 0
    echo "$name: missing arguments: usage: $usage" >&2
    exit 1
}

# cli_count NAME WHAT VALUE MIN: the refusal of a VALUE (for WHAT) that is not a whole number >= MIN
cli_count() {
    case "$3" in '' | *[!0-9]*) ;; *) [ "$3" -ge "$4" ] 2>/dev/null && return 0 ;; esac
    echo "$1: $2 $3: expected a whole number >= $4 (--help for the usage)" >&2
    exit 1
}
