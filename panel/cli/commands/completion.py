"""`completion bash`: a bash completion script made from the parser itself, so it never falls behind
the commands: subcommands, options, choices, files for -f, and deployment or model names from the panel."""

import argparse

from panel.cli.commands import add_command

EPILOG = """\
Load it in the current shell:
  source <(ascend-panel completion bash)
or for every new shell:
  ascend-panel completion bash > ~/.local/share/bash-completion/completions/ascend-panel"""

NAME_SOURCES = {  # what a NAME argument completes to: the panel's names, asked with the user's token
    "deployments": "ascend-panel get deployments -o name 2>/dev/null",
    "models": "ascend-panel models ls -o name 2>/dev/null",
    "nodes": "ascend-panel nodes ls -o name 2>/dev/null",
    "contexts": "ascend-panel config get-contexts -o name 2>/dev/null",  # the config file only
}


def register(commands) -> None:
    parser = add_command(commands, "completion", "print a shell completion script", epilog=EPILOG)
    parser.add_argument("shell", choices=("bash",), help="the shell (bash)")
    parser.set_defaults(run=completion_command)


def completion_command(args) -> int:
    print(bash_script(args.root_parser))  # the whole parser, not the one this command hangs from
    return 0


def _walk(parser: argparse.ArgumentParser, path: tuple = ()):
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def _commands(parser) -> list[str]:
    return [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


def bash_script(root: argparse.ArgumentParser) -> str:
    commands, options, values, names = [], [], [], []
    for path, parser in _walk(root):
        words = _commands(parser)
        if words:
            commands.append(f'        "{path}") echo "{" ".join(words)}" ;;')
        flags = [flag for action in parser._actions for flag in action.option_strings]
        options.append(f'        "{path}") echo "{" ".join(flags)}" ;;')
        for action in parser._actions:
            patterns = "|".join(f'"{path}|{flag}"' for flag in action.option_strings)
            if not patterns:
                completer = getattr(action, "completer", None)
                if completer in NAME_SOURCES:
                    names.append(f'        "{path}") {NAME_SOURCES[completer]} ;;')
                continue
            completer = getattr(action, "completer", None)
            if completer == "files":
                values.append(f'        {patterns}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
            elif completer in NAME_SOURCES:
                found = f'"$({NAME_SOURCES[completer]})"'
                values.append(f'        {patterns}) COMPREPLY=($(compgen -W {found} -- "$cur")); return ;;')
            elif action.choices:
                choices = " ".join(str(choice) for choice in action.choices)
                values.append(
                    f'        {patterns}) COMPREPLY=($(compgen -W "{choices}" -- "$cur")); return ;;'
                )
            elif action.nargs != 0:
                values.append(f"        {patterns}) return ;;")  # a free value: nothing to offer
    return BASH_TEMPLATE.format(
        commands="\n".join(commands),
        options="\n".join(options),
        values="\n".join(values),
        names="\n".join(names),
    )


BASH_TEMPLATE = """\
# bash completion for ascend-panel (made by `ascend-panel completion bash`)
_ascend_panel_commands() {{
    case "$1" in
{commands}
    esac
}}
_ascend_panel_options() {{
    case "$1" in
{options}
    esac
}}
_ascend_panel_names() {{
    case "$1" in
{names}
    esac
}}
_ascend_panel() {{
    local cur prev path="" i word
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case " $(_ascend_panel_commands "$path") " in
            *" $word "*) path="${{path:+$path }}$word" ;;
        esac
    done
    COMPREPLY=()
    case "$path|$prev" in
{values}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_ascend_panel_options "$path")" -- "$cur"))
        return
    fi
    local words
    words="$(_ascend_panel_commands "$path")"
    if [[ -n "$words" ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$(_ascend_panel_names "$path")" -- "$cur"))
    fi
}}
complete -F _ascend_panel ascend-panel"""
