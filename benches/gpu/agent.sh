# Sourced by the GPU scripts: start and stop the carried agent around a workload.
#   agent_start CONFIG LOG   starts "$GPUSHIP run --config CONFIG" (output to LOG), waits until
#                            capture started; its pid is in $AGENT. Fails (status 1, the log on
#                            stderr) when the agent exits first or does not start in 30 s
#   agent_stop               SIGINT, then waits for the drain
#   parquet_config FILE DIR  a config with the agent's defaults and a Parquet lake in DIR/lake
#                            (state in DIR/state, metrics off); more sections can be appended
#   watched_config FILE DIR PORT  the same with /metrics on 127.0.0.1:PORT, 2 s statistics
#                            intervals and files closed after a second

agent_start() {
	"$GPUSHIP" run --config "$1" >"$2" 2>&1 &
	AGENT=$!
	for _ in $(seq 1 300); do
		grep -q "capture started" "$2" && return 0
		kill -0 "$AGENT" 2>/dev/null || break
		sleep 0.1
	done
	echo "the agent did not start:" >&2
	cat "$2" >&2
	return 1
}

agent_stop() {
	kill -INT "$AGENT"
	wait "$AGENT"
	AGENT=
}

parquet_config() {
	cat >"$1" <<TOML
[agent]
state_dir = "$2/state"
[metrics]
enabled = false
[[sinks]]
type = "parquet"
path = "$2/lake"
TOML
}

watched_config() {
	cat >"$1" <<TOML
[agent]
state_dir = "$2/state"
[metrics]
address = "127.0.0.1:$3"
[sources.cuda]
stats_interval_secs = 2
[[sinks]]
type = "parquet"
path = "$2/lake"
max_file_age_secs = 1
TOML
}
