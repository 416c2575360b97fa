"""What ``gw --help`` and every verb's help say beyond the declarations: the topics the verbs are grouped
under, the global options, and one or more examples per verb (issue 25, point 4).

Plain data (no typer): ``declare.py`` attaches an example to each declaration as the command's epilog and
groups the root help by ``TOPICS``; the fast path prints the result from ``fast_help.py``, generated from
the same click objects. ``tests/test_everyday_help.py`` checks every verb has an example and sits under
one topic.
"""

from __future__ import annotations

# Topic title -> the top-level commands under it, in the order the root help lists them.
TOPICS: dict[str, tuple[str, ...]] = {
    "Items": ("init", "new", "show", "list", "ready", "edit", "check", "decision", "done", "cancel", "reopen",
              "search", "blocked", "stale", "summary", "dep", "history", "log", "children", "defer", "undefer",
              "wait", "unwait", "waits"),
    "Leases": ("claim", "renew", "release", "handoff", "takeover", "revoke", "conflicts"),
    "Conversations": ("msg", "thread", "inbox", "ack", "ask", "decide"),
    "Sessions": ("session", "step", "publish", "queue", "hooks"),
    "Running agents": ("run", "runs", "capture", "send", "detach", "stop", "attach", "coordinate", "launcher", "context",
                       "prime", "onboard", "report", "cost"),
    "Remote (several machines)": ("remote", "sync", "push", "pull", "status", "retry"),
    "Serve and MCP": ("serve", "mcp"),
    "Import and export": ("import", "export", "apply", "shadow"),
    "Help and housekeeping": ("help", "whoami", "doctor", "completion", "cache", "config", "demo"),
}

# The options every verb takes, accepted before the verb too (``gw -C DIR --as bob claim ID``).
GLOBAL_OPTIONS: tuple[tuple[str, str], ...] = (
    ("-C DIR", "Run as if gw was started in DIR (several combine, as in git)."),
    ("--json", "Print JSON on stdout (errors too); --json=a,b selects fields."),
    ("--jq EXPR", "Filter the JSON through jq (needs the jq extra)."),
    ("--as NAME", "Act as NAME (default: GW_AGENT, else user@host/s<session>)."),
    ("--no-pager, -P", "Do not page listings on a terminal."),
    ("-h, --help", "This help; gw help VERB, or gw VERB --help, for a verb's."),
)

# Declaration function name (verbs/<topic>.py) -> example command lines.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "init": ("gw init", "gw init --remote origin"),
    "new": ('gw new "Fix the login form" -p 1 -l ui -c "tests pass"', 'gw new "Deploy" --dep w-3fa9',
            'gw new "login fails" --template bug'),
    "show": ("gw show w-3fa9", "gw show w-3fa9 w-77c1 --json"),
    "list_": ("gw list", "gw list -s open,blocked -l ui --sort updated", "gw list --mine --json=item,title"),
    "ready": ("gw ready", "gw ready -l backend -n 5 --explain"),
    "edit": ("gw edit w-3fa9 --title \"Fix the login form\" --add-label ui", "gw edit w-3fa9 w-77c1 -p 0"),
    "check": ("gw check w-3fa9 1",),
    "defer": ("gw defer w-3fa9 --until 2h", "gw defer w-3fa9 --until 2030-01-31"),
    "undefer": ("gw undefer w-3fa9",),
    "wait": ("gw wait w-3fa9 --ref refs/pull/12/head --reachable-from main --remote origin",
             "gw wait w-3fa9 --command 'gh pr checks 12' --every 1m --timeout 4h"),
    "unwait": ("gw unwait w-3fa9 2",),
    "waits_check": ("gw waits check",),
    "decision": ('gw decision w-3fa9 "use SQLite" --why "one file, no server"',),
    "done": ("gw done w-3fa9", 'gw done w-3fa9 --force --reason "criterion 2 moved to w-77c1"'),
    "cancel": ('gw cancel w-3fa9 --reason "not needed"', "gw cancel w-77c1 --duplicate-of w-3fa9"),
    "reopen": ('gw reopen w-3fa9 --reason "the bug is back"',),
    "history": ("gw history w-3fa9", "gw history w-3fa9 --since 2d"),
    "children": ("gw children w-3fa9", "gw children w-3fa9 -t bug --json"),
    "conflicts": ("gw conflicts", "gw conflicts --json"),
    "detach": ('gw detach x-1a2b --reason "the operator keeps it"',),
    "log": ("gw log -n 20", "gw log w-3fa9 --since 7d"),
    "blocked": ("gw blocked",),
    "search": ('gw search "login" -s open',),
    "dep_tree": ("gw dep tree w-3fa9",),
    "dep_graph": ("gw dep graph | mmdc -i - -o deps.svg", "gw dep graph w-3fa9 --format dot | dot -Tsvg > deps.svg"),
    "stale": ("gw stale --for 2h",),
    "summary": ("gw summary --json",),
    "prime": ("gw prime",),
    "whoami": ("gw whoami", "GW_AGENT=bot-1 gw whoami --json"),
    "onboard": ("gw onboard >> AGENTS.md",),
    "doctor": ("gw doctor", "gw doctor --json"),
    "completion": ('eval "$(gw completion bash)"',),
    "help": ("gw help claim", "gw help session create"),
    "claim": ("gw claim w-3fa9 --ttl 30m", "gw claim --next -l backend"),
    "renew": ("gw renew w-3fa9 --ttl 15m",),
    "release": ("gw release w-3fa9",),
    "takeover": ("gw takeover w-3fa9",),
    "revoke": ('gw revoke w-3fa9 --reason "worker crashed"',),
    "handoff": ('gw handoff w-3fa9 --reason needs-human -m "stuck on the API key"',),
    "cache_status": ("gw cache status",),
    "config_get": ("gw config get default_ttl", "gw config get admins --json"),
    "config_set": ("gw config set default_ttl 30m", "gw config set admins lead,ops --shared"),
    "config_list": ("gw config list",),
    "cache_rebuild": ("gw cache rebuild",),
    "cache_drop": ("gw cache drop",),
    "remote_set": ("gw remote set origin",),
    "sync": ("gw sync",),
    "push": ("gw push",),
    "pull": ("gw pull",),
    "retry": ("gw retry c-1a2b3c4d5e6f7a8b",),
    "status": ("gw status",),
    "demo": ("gw demo",),
    "msg": ('gw msg w-3fa9 "the schema is in docs/db.md"', 'gw msg w-3fa9 "yes" --reply-to 2 -k answer'),
    "thread": ("gw thread w-3fa9", "gw thread w-3fa9 --follow --json"),
    "ack": ("gw ack w-3fa9 4 --read",),
    "inbox": ("gw inbox",),
    "ask": ('gw ask w-3fa9 "ship on Friday?" -o yes -o no --to alice',),
    "decide": ('gw decide w-3fa9 1 --choose yes --why "QA passed"',),
    "session_start": ("gw session start w-3fa9",),
    "session_commit": ('gw session commit --file src/app.py -m "fix the form"',),
    "session_list": ("gw session list",),
    "session_drop": ('gw session drop s-1a2b --reason "wrong approach"',),
    "publish": ("gw publish --into main", "gw publish --queue"),
    "queue_": ("gw queue",),
    "queue_list": ("gw queue list --json",),
    "queue_work": ("gw queue work --once",),
    "queue_remove": ('gw queue remove 20300101-120000-proj-alice --reason "not ready"',),
    "hooks_install": ("gw hooks install", "gw hooks install --server"),
    "run": ("gw run w-3fa9 -- claude -p \"$(gw context w-3fa9)\"",),
    "runs": ("gw runs --state running",),
    "capture": ("gw capture x-1a2b --lines 50",),
    "send": ('gw send x-1a2b "continue" --enter',),
    "stop": ('gw stop x-1a2b --reason "wrong item"',),
    "attach": ("gw attach x-1a2b",),
    "coordinate": ("gw coordinate --once",),
    "launcher": ("gw launcher &", "gw launcher --status --json"),
    "context": ("gw context w-3fa9",),
    "report": ("gw report --tokens-in 12000 --tokens-out 3400 --cost 0.42 --model claude-sonnet",),
    "cost": ("gw cost --since 7d --by day", "gw cost --item w-3fa9 --json"),
    "mcp": ("gw mcp --as agent-1", "gw mcp --tools"),
    "session_create": ("gw session create w-3fa9 --chain review",),
    "session_status": ("gw session status m-1a2b",),
    "session_done": ("gw session done m-1a2b",),
    "session_stop": ('gw session stop m-1a2b --reason "requirements changed"',),
    "step_next": ("gw step next m-1a2b --launch",),
    "step_submit": ("gw step submit m-1a2b step-1/parallel-1",),
    "step_wait": ("gw step wait m-1a2b step-1/parallel-1 --timeout 600",),
    "step_block": ('gw step block m-1a2b step-1/parallel-1 --reason "needs a decision"',),
    "step_resume": ("gw step resume m-1a2b",),
    "apply_": ("gw apply commands.jsonl", "echo '{\"op\": \"new\", \"title\": \"x\"}' | gw apply -"),
    "import_": ("gw import beads .beads/issues.jsonl", "gw import github issues.json --prefer source"),
    "export": ("gw export --output items.jsonl", "gw export --format csv > items.csv"),
    "shadow_add": ("gw shadow add bd --kind beads --source 'bd export'",),
    "shadow_report": ("gw shadow report bd --record",),
    "serve": ("gw serve --bind 127.0.0.1:8765",),
    "serve_token_add": ("gw serve token add alice --role person",),
    "serve_token_list": ("gw serve token list",),
    "serve_token_revoke": ("gw serve token revoke alice",),
    "delegate": ("gw delegate w-3fa9 --to lab", "gw delegate w-3fa9 --to lab --plan"),
    "delegations": ("gw delegations",),
    "delegation_observe": ("gw delegation observe d-1a2b",),
    "delegation_cancel": ('gw delegation cancel d-1a2b --reason "not needed"',),
    "receipts_verify": ("gw receipts verify",),
}


def epilog(name: str, fallback: tuple[str, ...] = ()) -> str | None:
    """The examples of declaration ``name`` as a click epilog (``\\b``: click keeps its lines as they are);
    ``fallback``: the lines to show when ``EXAMPLES`` has none (the declaration's ``sample``)."""
    lines = EXAMPLES.get(name) or fallback
    if not lines:
        return None
    return "\b\n" + ("Example:" if len(lines) == 1 else "Examples:") + "\n" + "\n".join(f"  {line}" for line in lines)
