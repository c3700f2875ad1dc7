# bash completion for pipec. Commands, options and pass names come from pipec itself
# (`pipec --help`, `pipec help COMMAND`, `pipec opt --list`), so they always match the
# installed binary. Installed by `make install` into share/bash-completion/completions.
_pipec()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local pipec=${COMP_WORDS[0]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        local cmds
        cmds=$("$pipec" --help 2>/dev/null |
               awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }')
        COMPREPLY=($(compgen -W "$cmds help --help --version" -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]}
    case $prev in
    --pass|-p)
        COMPREPLY=($(compgen -W "$("$pipec" opt --list 2>/dev/null | awk '/^  [a-z]/ { print $1 }')" -- "$cur"))
        return ;;
    --backend) COMPREPLY=($(compgen -W "cpu cuda" -- "$cur")); return ;;
    --launcher) COMPREPLY=($(compgen -W "threads mpi" -- "$cur")); return ;;
    --format) COMPREPLY=($(compgen -W "text csv md latex json" -- "$cur")); return ;;
    --workload) COMPREPLY=($(compgen -W "mlp synthetic" -- "$cur")); return ;;
    -I|--include|--cache) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    -o|--output|--svg|--trace|--data|--html) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --iters|--budget|--top|--width|--timeout|--time-scale|--lr|--seed|--name|--set) return ;;
    esac
    if [ "$cmd" = help ]; then
        COMPREPLY=($(compgen -W "$("$pipec" --help 2>/dev/null |
            awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }')" -- "$cur"))
        return
    fi
    if [[ $cur == -* ]]; then
        local opts
        opts=$("$pipec" help "$cmd" 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
        COMPREPLY=($(compgen -W "$opts -Werror" -- "$cur"))
        return
    fi
    local ext=pipe
    [ "$cmd" = import-csv ] && ext=csv
    COMPREPLY=($(compgen -f -X "!*.$ext" -- "$cur") $(compgen -d -- "$cur"))
}
complete -o filenames -F _pipec pipec
