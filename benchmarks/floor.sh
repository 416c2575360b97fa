#!/usr/bin/env bash
# The floor: one `gw claim ID` / `gw release ID` state change done with git plumbing in a shell.
#
#   floor.sh claim|release ITEM_ID [AGENT]     (run inside the repository; exit 75 = held/lost, 7 = not holder)
#
# This is what a minimal shell implementation of one command costs: it reads the tip and the item's
# files, writes the same blobs gw writes (item.yaml, lease.yaml, events.log, counters.yaml), rebuilds
# the trees on the path (item folder, shard, items/, commands/<h>/, commands/, root) with `git mktree`,
# adds the command record commands/<h>/<command id> like gw does, writes the commit with `git
# commit-tree` and moves the ref with `git update-ref REF NEW OLD` (compare-and-swap), retrying from
# the new tip when another writer moved first. Text is edited with bash builtins only, so the cost is
# the process starts (17 git + 1 sha1sum per command) plus bash's own start.
# It checks only what a claim must check (an active, unexpired lease refuses) and does no validation.
set -eu
export LC_ALL=C TZ=UTC GIT_TERMINAL_PROMPT=0
op=$1 id=$2 who=${3:-${GW_AGENT:-bench}}
ref=${GW_REF:-refs/gitwork/state}
dir=items/${id:2:2}/$id
tmp=${FLOOR_TMP:?set FLOOR_TMP to an existing scratch directory}/$$  # no mkdir/rm: each is a process
export GIT_AUTHOR_NAME=$who GIT_AUTHOR_EMAIL=$who@gitwork.invalid
export GIT_COMMITTER_NAME=$who GIT_COMMITTER_EMAIL=$who@gitwork.invalid

# Read one object from the cat-file --batch stream on fd 3 into REPLY ("" when missing).
read_obj() {
    local header
    IFS= read -r header <&3
    set -- $header
    if [ "${2:-}" = missing ]; then REPLY=; return; fi
    IFS= read -r -N "$3" REPLY <&3 || true
    IFS= read -r _ <&3 || true
}

# Print ls-tree output ($1) with the entries named in the remaining args (name=oid) replaced/added.
tree_with() {
    local listing=$1; shift
    local -A repl=()
    local kv line name
    for kv in "$@"; do repl[${kv%%=*}]=${kv#*=}; done
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        name=${line#*$'\t'}
        if [ -n "${repl[$name]+x}" ]; then continue; fi
        printf '%s\n' "$line"
    done <<<"$listing"
    for name in "${!repl[@]}"; do
        case ${repl[$name]} in
            tree:*) printf '040000 tree %s\t%s\n' "${repl[$name]#tree:}" "$name" ;;
            *) printf '100644 blob %s\t%s\n' "${repl[$name]}" "$name" ;;
        esac
    done
}

for ((attempt = 1; attempt <= 1000; attempt++)); do
    old=$(git rev-parse -q --verify "$ref^{commit}")
    exec 3< <(printf '%s\n' "$old:counters.yaml" "$old:$dir/item.yaml" "$old:$dir/lease.yaml" "$old:$dir/events.log" \
        | git cat-file --batch)
    read_obj; counters=$REPLY
    read_obj; item=$REPLY
    read_obj; lease=$REPLY
    read_obj; events=$REPLY
    exec 3<&-
    [ -n "$item" ] || { echo "no item $id" >&2; exit 3; }
    printf -v now '%(%s)T' -1
    printf -v when '%(%Y-%m-%dT%H:%M:%SZ)T' "$now"
    printf -v cmd 'c-%04x%04x%04x%04x' $RANDOM $RANDOM $RANDOM $RANDOM
    read -r cmd_shard _ < <(printf '%s' "$cmd" | sha1sum); cmd_shard=${cmd_shard:0:2}
    last=${events%$'\n'}; last=${last##*$'\n'}; [[ $last =~ \"seq\":([0-9]+) ]]; seq=$((BASH_REMATCH[1] + 1))
    [[ $lease =~ epoch:\ ([0-9]+) ]] && epoch=${BASH_REMATCH[1]} || epoch=0
    state=; [[ $lease =~ state:\ ([a-z-]+) ]] && state=${BASH_REMATCH[1]}
    case $op in
    claim)
        if [ "$state" = active ]; then
            [[ $lease =~ expires_at:\ \"([^\"]+)\" ]]
            if [[ ! "${BASH_REMATCH[1]}" < "$when" ]]; then echo "$id is held" >&2; exit 75; fi
        fi
        [[ $counters =~ fence:\ ([0-9]+) ]]; fence=$((BASH_REMATCH[1] + 1)); epoch=$((epoch + 1))
        printf -v expires '%(%Y-%m-%dT%H:%M:%SZ)T' $((now + 900))
        printf 'item: %s\nepoch: %d\nfence: %d\nholder: %s\nstate: active\ngranted_at: "%s"\nexpires_at: "%s"\nttl: 900\ngrant: %s\n' \
            "$id" "$epoch" "$fence" "$who" "$when" "$expires" "$cmd" >"$tmp.lease"
        item=${item/$'\nstatus: open\n'/$'\nstatus: in_progress\n'}
        printf '%s' "${item%%updated_at: *}updated_at: \"$when\""$'\n' >"$tmp.item"
        printf '%s{"seq":%d,"at":"%s","by":"%s","type":"claim","cmd":"%s","epoch":%d,"fence":%d,"ttl":900,"expires_at":"%s"}\n' \
            "$events" "$seq" "$when" "$who" "$cmd" "$epoch" "$fence" "$expires" >"$tmp.events"
        printf 'fence: %d\n' "$fence" >"$tmp.counters"
        printf '{"at": "%s", "by": "%s", "op": "claim", "result": {"epoch": %d, "expires_at": "%s", "fence": %d, "holder": "%s", "item": "%s", "state": "active"}}\n' \
            "$when" "$who" "$epoch" "$expires" "$fence" "$who" "$id" >"$tmp.record"
        { read -r b_lease; read -r b_item; read -r b_events; read -r b_counters; read -r b_record; } \
            < <(git hash-object -w "$tmp.lease" "$tmp.item" "$tmp.events" "$tmp.counters" "$tmp.record")
        ;;
    release)
        [[ $lease =~ fence:\ ([0-9]+) ]] && fence=${BASH_REMATCH[1]} || fence=0
        if [ "$state" != active ] || [[ $lease != *$'\nholder: '"$who"$'\n'* ]]; then
            echo "you hold no lease on $id" >&2; exit 7
        fi
        printf '%s' "${lease/$'\nstate: active\n'/$'\nstate: released\n'}ended_at: \"$when\""$'\n'"ended_by: $who"$'\n' >"$tmp.lease"
        item=${item/$'\nstatus: in_progress\n'/$'\nstatus: open\n'}
        printf '%s' "${item%%updated_at: *}updated_at: \"$when\""$'\n' >"$tmp.item"
        printf '%s{"seq":%d,"at":"%s","by":"%s","type":"released","cmd":"%s","epoch":%d,"fence":%d,"holder":"%s"}\n' \
            "$events" "$seq" "$when" "$who" "$cmd" "$epoch" "$fence" "$who" >"$tmp.events"
        printf '{"at": "%s", "by": "%s", "op": "release", "result": {"epoch": %d, "fence": %d, "holder": "%s", "item": "%s", "state": "released"}}\n' \
            "$when" "$who" "$epoch" "$fence" "$who" "$id" >"$tmp.record"
        { read -r b_lease; read -r b_item; read -r b_events; read -r b_record; } \
            < <(git hash-object -w "$tmp.lease" "$tmp.item" "$tmp.events" "$tmp.record")
        b_counters=
        ;;
    *) echo "usage: floor.sh claim|release ITEM_ID [AGENT]" >&2; exit 2 ;;
    esac
    t_item=$(tree_with "$(git ls-tree "$old:$dir")" lease.yaml="$b_lease" item.yaml="$b_item" events.log="$b_events" \
        | git mktree)
    t_shard=$(tree_with "$(git ls-tree "$old:items/${id:2:2}")" "$id=tree:$t_item" | git mktree)
    t_items=$(tree_with "$(git ls-tree "$old:items")" "${id:2:2}=tree:$t_shard" | git mktree)
    root_changes=("items=tree:$t_items")
    [ -z "$b_counters" ] || root_changes+=(counters.yaml="$b_counters")
    # The command record commands/<first 2 hex of sha1(command id)>/<command id> (docs/format.md).
    t_cmds=$(tree_with "$(git ls-tree "$old:commands/$cmd_shard" 2>/dev/null || true)" "$cmd=$b_record" | git mktree)
    t_commands=$(tree_with "$(git ls-tree "$old:commands" 2>/dev/null || true)" "$cmd_shard=tree:$t_cmds" | git mktree)
    root_changes+=("commands=tree:$t_commands")
    t_root=$(tree_with "$(git ls-tree "$old")" "${root_changes[@]}" | git mktree)
    msg="$op $id by $who (epoch $epoch, fence $fence)"$'\n\n'"Command: {\"as\": \"$who\", \"id\": \"$cmd\", \"item\": \"$id\", \"op\": \"$op\"}"$'\n\n'"Work-Item: $id"$'\n'"Lease-Epoch: $epoch"$'\n'"Fence: $fence"$'\n'"Command-Id: $cmd"
    new=$(git commit-tree "$t_root" -p "$old" -m "$msg")
    if git update-ref -m gitwork "$ref" "$new" "$old" 2>/dev/null; then
        [ "$op" = claim ] && printf '%s\n' "$id"
        exit 0
    fi
    sleep 0.0$((RANDOM % 9 + 1))  # lost the race: back off a little and redo from the new tip
done
exit 75
