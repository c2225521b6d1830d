//! The file `airlock init` writes: every default, with comments.

/// A commented `airlock.yaml` holding every default value. Tests hold it equal,
/// key for key, to `Config::default()`.
pub const TEMPLATE: &str = r#"# airlock.yaml: configuration of the airlock gateway.
#
# Every value below is the built-in default; delete a key to keep its default.
# Unknown keys are errors. `airlock config check` validates this file and
# `airlock config schema` prints its JSON Schema.

workspace:
  root: .                    # sandbox root, relative to the --workspace dir; canonicalized at start
  state_dir: .airlock        # approvals db, audit log, blobs, snapshots; relative to root

file_broker:                 # limits of the file tools
  enabled: true              # false turns the file tools off (spec 000)
  hitl_ttl_seconds: 120      # longest a deferred proposal lives (a rule's or risk's timeout shortens it)
  max_read_bytes_default: 32000
  max_read_bytes_hard: 131072
  max_write_bytes_hard: 524288
  max_inline_bytes: 16384    # larger output becomes a blob (output_mode: auto)
  diff_preview_max_chars: 8000
  absolute_paths: reject     # reject | within_root
  follow_symlinks: within_root_only   # deny | within_root_only | allow
  allowlisted_create_dirs: [src/, lib/, tests/, docs/, scripts/]   # root-level files always allowed
  deny_path_globs: ["**/.env", "**/*.pem", "**/*id_rsa*", "**/secrets/**"]
  max_grep_results: 100
  max_glob_results: 1000
  max_scan_files: 200000     # spec 003 limits: grep/glob stop with truncated + truncated_reason
  max_scan_bytes: 2147483648
  max_changed_files: 200     # a patch changing more files is refused (limit_exceeded)
  max_edit_replacements: 1000
  allowed_patch_formats: [v4a, unified]
  audit_log_enabled: true    # spec 000's switch; only true is accepted (every call is audited)
  allow_hardlinks: false     # refuse regular files with more than one hard link (never for protected paths)

security:
  write_tool_allowlist: null # null = no user restriction; [] = write tools disabled; [ids] = only these users
  write_tool_confirmation: true   # false: write calls of allowed users are not asked
  hitl:
    enabled: true            # false: calls that would ask are allowed (still audited)
    default_timeout: 60      # seconds a waiting call waits when neither a rule nor a risk policy says
                             # one rule: a rule's timeout, else its risk's, bounds every approval;
                             # a waiting call gets that long, a deferred one at most hitl_ttl_seconds
    approval_mode: wait      # wait | defer
    elicitation_fallback: auto   # when an MCP client cannot be asked: auto | deny | allow | defer | wait
                             # auto: wait while `airlock watch`, the web UI or a webhook is there, else deny
    max_pending: 100         # per workspace; more are rejected with rate_limited
    max_pending_per_session: 10
    rules: []                # first match wins; for example:
    # rules:
    #   - tools: [delete_file, "*__delete_*"]
    #     risk: high
    #     require_approval: true
    #     timeout: 60
    #   - tools: [write_file]
    #     conditions: [{param: path, matches: "^(/etc|/sys|/root)/"}]   # also equals, glob, in
    #     risk: critical
    #   - tools: ["*__drop_*"]
    #     decision: deny
    policies:                # per risk level: require_approval, timeout, allow_skip, require_reason, approvers
      low:      {require_approval: false}
      medium:   {require_approval: true, timeout: 120, allow_skip: true}
      high:     {require_approval: true, timeout: 60,  allow_skip: false}
      critical: {require_approval: true, timeout: 30,  allow_skip: false, require_reason: true, approvers: [admin]}

# default_profile: supervised  # profile for endpoints that name none; omit = no profile
profiles: {}                 # names match ^[A-Za-z0-9_]{1,32}$; precedence deny > ask > allow; for example:
# profiles:
#   safe:
#     allowlist: ["read_file", "grep", "glob", "list_dir", "stat", "exists"]
#   supervised:
#     denylist: ["*__delete_*"]
#     asklist: ["write_file", "edit_file", "apply_patch", "*__*"]
#     elicitation_fallback: deny   # auto | deny | allow | defer | wait

upstreams: []                # MCP servers whose tools airlock gates as <name>__<tool>; for example:
# upstreams:
#   - name: fs
#     command: npx
#     args: ["@modelcontextprotocol/server-filesystem", "."]
#     trusted_annotations: false
#   - name: remote
#     url: https://mcp.example.com/mcp   # http:// or https:// (trusting tls.ca_file too)

auth:                        # HTTP only; tokens stored as sha256
  tokens: []
  # tokens:
  #   - {name: claude, sha256: "<64 hex digits>", roles: [agent], user: user-1}
  #   - {name: user-1-phone, sha256: "<64 hex digits>", roles: [approver], user: user-1}

audit:
  path: .airlock/audit.jsonl
  hmac_key_env: AIRLOCK_AUDIT_KEY   # when this variable is set, the chain is keyed (HMAC-SHA256)
  checkpoints:                # signed Merkle tree heads (airlock audit key | checkpoint | prove)
    every: 1000              # one every N records and when a server stops; 0: none
    webhook: null            # POST each signed checkpoint (JSON with the note) here
    origin: null             # the log's name in checkpoints; null: made once and kept
  ship:                      # every record to a SIEM, in order, once (spec 000 phase 2)
    syslog: null             # udp://host:514 | tcp://host:601 | tls://host:6514 (RFC 5424)
    http: null               # POST batches (a JSON array of records) here

notify:
  webhooks: []               # POST each new approval, with signed approve/deny links; for example:
  # webhooks:
  #   - {url: "http://127.0.0.1:9000/hook", events: [created]}

http:                        # who may reach `airlock serve --http` from a browser
  allowed_hosts: []          # Host values beyond loopback, the bound address and the --public-url host
  allowed_origins: []        # cross-origin callers allowed (scheme://host[:port]); none by default

mcp:
  max_message_bytes: 16777216   # longest JSON-RPC message; longer ones are refused unread

approvals:
  grant_ttl: 8h              # always-allow grants end after this unless the approval says --for
  same_user: false           # spec 001: only the user who made a call may decide it
                             # (implied when security.write_tool_allowlist lists users)

tls:
  ca_file: null              # extra PEM roots (a private CA) for https upstreams, webhooks, chat APIs

channels: {}                 # chat approvers; each connects outbound only (no public URL); for example:
# channels:
#   telegram:
#     token_env: AIRLOCK_TELEGRAM_TOKEN
#     api_url: https://api.telegram.org
#     chats: [-1001234567890]          # where approvals go when the requester names no chat
#     users: {"123456789": user-1}     # platform user id -> airlock user (role approver), or
#                                      # {"123456789": {user: user-1, roles: [approver, admin]}}
#     timeout: 60                      # seconds; capped by the risk policy's timeout
#   slack:
#     bot_token_env: AIRLOCK_SLACK_BOT_TOKEN
#     app_token_env: AIRLOCK_SLACK_APP_TOKEN   # Socket Mode
#     api_url: https://slack.com/api
#     channels: [C0123456]
#     users: {U0123456: user-1}
#   discord:
#     token_env: AIRLOCK_DISCORD_TOKEN
#     api_url: https://discord.com/api/v10
#     gateway_url: null                # default: asked from the API
#     channels: ["112233445566778899"]
#     users: {"998877665544332211": user-1}

store:                       # where the state lives (DESIGN 7.2)
  url: null                  # null = SQLite in the state dir; postgres://user@host/db (${VAR} from
                             # the environment) for several instances on one database
  pool_size: 16              # connections to PostgreSQL at most
  lease: 10s                 # a stopped instance's claims stand this long, then another takes over

telemetry:                   # what monitoring tools can read (DESIGN 8.1)
  metrics: true              # GET /metrics (Prometheus text) on the HTTP listener, admin tokens only
  otlp:
    endpoint: null           # http://collector:4318: each call's trace and every audit record as a log (OTLP/HTTP)

codemode:                    # codemode_eval: scripts whose every tool call is gated (DESIGN 5.2)
  enabled: true
  profile_tools: []          # profiles also offered as codemode_eval_<profile> (rights: both profiles)
  cpu: 5s                    # per run
  wall: 60s                  # per run, not counting time waiting for a human
  memory_bytes: 67108864
  stack_bytes: 1048576
  max_source_bytes: 262144
  max_result_bytes: 1048576
  max_console_bytes: 65536
  max_calls: 256
  max_in_flight: 8
  max_concurrent_runs: 2     # at once in this process

sessions:                    # session_open: handles that scope what calls may touch (DESIGN 5.3)
  max_ttl: 8h                # the longest a session lives
  idle_ttl: 30m              # without a call
  new_roots: deny            # deny | ask: a root outside the workspace
  env_allow: []              # variables a session may set for its commands, beside exec.env_allow
  max_open_per_principal: 64

exec:                        # the shell tool (DESIGN 5.1)
  enabled: true
  default: ask               # allow | ask | deny for commands no rule matches
  preview: overlay           # overlay | rerun | none
  sandbox: auto              # auto (landlock and/or namespaces) | none (then every exec asks)
  network: false
  env_allow: [PATH, HOME, LANG, LC_ALL, TERM, USER]
  timeout: 120s
  max_output_bytes: 1048576
  max_processes: 512         # at once, the command and what it starts
  max_memory_bytes: 8589934592  # its processes together (a cgroup where airlock can make one)
  rules: []                  # the strictest decision across a command line's commands wins;
                             # common read-only commands (ls, cat, rg, git status|diff|log|show,
                             # cargo check|test|build …) are allowed unless a rule says otherwise
# rules:
#   - {prefix: [git, status], decision: allow, match: ["git status -s"], not_match: ["git push"]}
#   - {prefix: [git, push], decision: ask, risk: high}
#   - {prefix: [rm, -rf, /], decision: deny}
#   - {prefix: [cargo, [build, test, check]], decision: allow}
"#;
