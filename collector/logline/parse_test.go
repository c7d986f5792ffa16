package logline

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantRecords lists, per fixture (../shared/fixtures, copied to testdata
// with the engine as prefix), every record its lines carry, in order.
// Lines without throughput (startup, access logs, llama-cli's summary, the
// Ollama CLI's own print) give none.
var wantRecords = map[string][]string{
	"llamacpp_json_log_format_2024.log": {
		"request prompt_tokens=27 dur=2.684386s key=\"slot 0 task 19\" t=2024-05-30T11:09:46Z",
		"request tokens=25 dur=3.559272s user=7.02391 key=\"slot 0 task 19\" t=2024-05-30T11:09:46Z",
	},
	"llamacpp_llama_cli_perf_context_print.log": {},
	"llamacpp_slot_spans_lv4_progress.log": {
		"cached cached=0 key=\"slot 5 task 18839\"",
		"progress tokens=178 user=59.14 avg=58.84 key=\"slot 5 task 18839\"",
		"request prompt_tokens=10 dur=10.88ms key=\"slot 5 task 18839\"",
		"request tokens=192 dur=3.45542s user=55.28 key=\"slot 5 task 18839\"",
	},
	"llamacpp_slot_spans_sweep.log": {
		"request prompt_tokens=9 dur=19.12ms key=\"slot 5 task 28\" t=2026-12-01T20:17:00.295468274Z",
		"request tokens=64 dur=228.28ms user=275.97 key=\"slot 5 task 28\" t=2026-12-01T20:17:00.295530713Z",
		"request prompt_tokens=9 dur=17.23ms key=\"slot 4 task 29\" t=2026-12-01T20:17:00.453636555Z",
		"request tokens=96 dur=388.45ms user=244.56 key=\"slot 4 task 29\" t=2026-12-01T20:17:00.453700526Z",
		"request prompt_tokens=8 dur=38.8ms key=\"slot 7 task 25\" t=2026-12-01T20:17:00.610349379Z",
		"request tokens=128 dur=564.58ms user=224.95 key=\"slot 7 task 25\" t=2026-12-01T20:17:00.610415745Z",
		"request prompt_tokens=12 dur=8.05ms key=\"slot 3 task 95\" t=2026-12-01T20:17:00.790709787Z",
		"request tokens=96 dur=479.27ms user=198.22 key=\"slot 3 task 95\" t=2026-12-01T20:17:00.790772807Z",
		"request prompt_tokens=13 dur=21.64ms key=\"slot 6 task 27\" t=2026-12-01T20:17:00.947652156Z",
		"request tokens=192 dur=876.96ms user=217.8 key=\"slot 6 task 27\" t=2026-12-01T20:17:00.947766392Z",
	},
	"llamacpp_midrun_tg_3s.log": {
		"progress tokens=1081 user=12.57 avg=12.93 key=\"slot 3 task 0\"",
		"progress tokens=1119 user=12.57 avg=12.92 key=\"slot 3 task 0\"",
		"progress tokens=1157 user=12.61 avg=12.9 key=\"slot 3 task 0\"",
		"progress tokens=1196 user=12.99 avg=12.91 key=\"slot 3 task 0\"",
		"progress tokens=1235 user=12.92 avg=12.91 key=\"slot 3 task 0\"",
	},
	"llamacpp_print_timing_multiline_no_prefix.log": {
		"request prompt_tokens=51 dur=915.13ms key=\"slot 0 task 0\"",
		"request tokens=275 dur=23.03887s user=11.94 key=\"slot 0 task 0\"",
	},
	"llamacpp_print_timing_multiline_trailing_space.log": {
		"request prompt_tokens=1360 dur=5.09347s key=\"slot 0 task 124\"",
		"request tokens=10 dur=319.58ms user=31.29 key=\"slot 0 task 124\"",
	},
	"llamacpp_print_timing_per_line_graphs_reused.log": {
		"progress tokens=697 user=63.36 key=\"slot 3 task 1941\"",
		"request prompt_tokens=104 dur=210.02ms key=\"slot 3 task 1941\"",
		"request tokens=764 dur=12.06066s user=63.35 key=\"slot 3 task 1941\"",
	},
	"llamacpp_print_timing_per_line_timestamps_spec.log": {
		"request prompt_tokens=4 dur=252.01ms key=\"slot 0 task 160\"",
		"request tokens=96 dur=5.7292s user=16.58 key=\"slot 0 task 160\"",
		"spec drafted=119 accepted=55 key=\"slot 0 task 160\"",
		"progress tokens=100 user=19.23 avg=19.04 key=\"slot 0 task 202\"",
		"progress tokens=158 user=18.62 avg=18.88 key=\"slot 0 task 202\"",
		"progress tokens=212 user=17.1 avg=18.39 key=\"slot 0 task 202\"",
		"progress tokens=259 user=15.3 avg=17.74 key=\"slot 0 task 202\"",
	},
	"llamacpp_prompt_processing_progress.log": {},
	// The newer acceptance line; the statistics line after it is no
	// request's and is not read.
	"llamacpp_print_timing_spec_mean_acceptance_pr24536.log": {
		"request prompt_tokens=20 dur=300.11ms key=\"slot 1 task 0\"",
		"request tokens=256 dur=2.29672s user=111.46 key=\"slot 1 task 0\"",
		"spec drafted=259 accepted=167 key=\"slot 1 task 0\"",
	},
	"llamacpp_router_port_prefix_multiline.log": {
		"progress tokens=172 user=12 key=\"slot 0 task 388\"",
		"request prompt_tokens=27 dur=789.03ms key=\"slot 0 task 388\"",
		"request tokens=192 dur=16.1125s user=11.92 key=\"slot 0 task 388\"",
	},
	"llamacpp_text_log_print_timings_2024.log": {
		"request prompt_tokens=12 dur=15.62ms key=\"slot 0 task 0\" t=2024-08-13T17:20:22Z",
		"request tokens=783 dur=3.19422s user=245.13 key=\"slot 0 task 0\" t=2024-08-13T17:20:22Z",
	},
	"llamacpp_text_log_ik_llama_2025.log": {
		"request prompt_tokens=76425 dur=9m40.85317s key=\"slot 0 task 2\" t=2025-10-05T20:03:03Z",
		"request tokens=403 dur=30.54066s user=13.2 key=\"slot 0 task 2\" t=2025-10-05T20:03:03Z",
		"request prompt_tokens=1 dur=259.95ms key=\"slot 0 task 425\" t=2025-10-05T20:03:59Z",
		"request tokens=336 dur=25.42014s user=13.22 key=\"slot 0 task 425\" t=2025-10-05T20:03:59Z",
	},
	"lmdeploy_metrics_log_2026.log": {
		"stat gen=2756.3 prompt=4618.5 run=45 wait=5 kv=0.216 key=\"DP0\" t=2026-02-05T17:05:17Z",
	},
	"nim_nim_log_lines_datadog_tests.log": {},
	"ollama_cli_verbose_summary.txt":      {},
	"ollama_gin_access_lines.log":         {},
	"ollama_inference_compute_gpu.log":    {},
	"ollama_journald_prefixed.log":        {},
	// One record per prompt batch; Stream keeps the task's first.
	"ollama_llama_server_passthrough_v0.30.log": {
		"cached cached=0 key=\"slot 0 task 0\"",
		"cached cached=512 key=\"slot 0 task 0\"",
		"cached cached=1024 key=\"slot 0 task 0\"",
		"cached cached=1536 key=\"slot 0 task 0\"",
	},
	"ollama_json_print_timings_slot_id_2024.log": {
		"request tokens=64 dur=31.807067s user=2.01213 key=\"slot 0 task 850\" t=2024-04-26T15:51:30Z",
	},
	"ollama_journald_llama_server_progress_v0.30.log": {
		"progress tokens=215 user=19.26 avg=18.96 key=\"slot 0 task 4121\" t=2026-08-28T16:17:16Z",
		"progress tokens=100 user=19.22 avg=19.02 key=\"slot 0 task 1549\" t=2026-08-28T16:17:19Z",
		"progress tokens=272 user=18.73 avg=18.91 key=\"slot 0 task 4121\" t=2026-08-28T16:17:19Z",
		"progress tokens=157 user=18.83 avg=18.95 key=\"slot 0 task 1549\" t=2026-08-28T16:17:22Z",
		"progress tokens=329 user=18.87 avg=18.91 key=\"slot 0 task 4121\" t=2026-08-28T16:17:22Z",
		"progress tokens=214 user=18.84 avg=18.92 key=\"slot 0 task 1549\" t=2026-08-28T16:17:25Z",
		"progress tokens=386 user=18.84 avg=18.9 key=\"slot 0 task 4121\" t=2026-08-28T16:17:25Z",
		"progress tokens=271 user=18.82 avg=18.9 key=\"slot 0 task 1549\" t=2026-08-28T16:17:28Z",
	},

	"sglang_decode_batch_bare_no_prefix.log": {
		"stat gen=1397.13 span=28.916s run=1010 wait=12279 kv=0.93",
	},
	"sglang_decode_batch_comma_cuda_graph_tp0.log": {
		"stat gen=144.95 span=1.38s run=5 wait=0 kv=0.29 t=2026-04-08T14:05:21Z",
		"stat gen=140.27 span=1.426s run=5 wait=0 kv=0.29 t=2026-04-08T14:05:22Z",
		"stat gen=136.39 span=1.466s run=5 wait=0 kv=0.29 t=2026-04-08T14:05:24Z",
		"stat gen=139.89 span=1.43s run=5 wait=0 kv=0.29 t=2026-04-08T14:05:25Z",
	},
	"sglang_decode_batch_old_period_hms.log": {
		"stat gen=447.31 span=179ms run=2 wait=0 kv=0",
		"stat gen=405.38 span=197ms run=2 wait=0 kv=0",
		"stat gen=446.97 span=179ms run=2 wait=0 kv=0",
		"stat gen=333.97 span=120ms run=1 wait=0 kv=0",
		"stat gen=238.27 span=168ms run=1 wait=0 kv=0",
	},
	"sglang_decode_prefill_comma_no_tp.log": {
		"stat gen=1635.11 span=783ms run=32 wait=0 kv=0.08 t=2026-04-05T20:02:51Z",
		"batch tokens=158 run=31 wait=0 kv=0.08 cached=0 t=2026-04-05T20:02:51Z",
		"batch tokens=290 run=31 wait=0 kv=0.08 cached=0 t=2026-04-05T20:02:52Z",
		"batch tokens=160 run=31 wait=0 kv=0.08 cached=0 t=2026-04-05T20:02:52Z",
	},
	"sglang_decode_dp_attention_accept_len.log": {
		"stat gen=171.01 span=5.427s run=8 wait=0 kv=0.13 key=\"DP0\" t=2025-05-31T18:31:21Z",
		"stat gen=168.28 span=5.439s run=8 wait=0 kv=0.12 key=\"DP6\" t=2025-05-31T18:31:21Z",
		"stat gen=173.06 span=5.436s run=8 wait=0 kv=0.13 key=\"DP5\" t=2025-05-31T18:31:21Z",
		"stat gen=155.8 span=5.443s run=8 wait=0 kv=0.13 key=\"DP7\" t=2025-05-31T18:31:23Z",
		"stat gen=152.08 span=5.429s run=8 wait=0 kv=0.13 key=\"DP2\" t=2025-05-31T18:31:25Z",
	},
	"sglang_decode_ray_prefix_same_second.log": {
		"stat gen=1374.02 span=175ms run=6 wait=0 kv=0.04 t=2026-03-22T13:53:37Z",
		"stat gen=1374.07 span=175ms run=6 wait=0 kv=0.04 t=2026-03-22T13:53:37Z",
		"stat gen=1372.59 span=175ms run=6 wait=0 kv=0.04 t=2026-03-22T13:53:38Z",
	},
	"sglang_decode_swa_accept_cap_len.log": {
		"stat gen=3.08 span=54.805s run=1 wait=0 kv=0 t=2026-08-15T05:37:25Z",
		"stat gen=453.13 span=375ms run=1 wait=0 kv=0 t=2026-08-15T05:37:25Z",
	},
	"sglang_prefill_cache_hit_rate_hms_2024.log": {
		"batch tokens=2062 run=0 wait=0 kv=0 cached=0",
		"batch tokens=8192 run=1 wait=38 kv=0.04 cached=291",
		"batch tokens=8192 run=4 wait=34 kv=0.18 cached=2753",
	},
	"sglang_prefill_v0.5.18_tp0_ep0_swa_pending.log": {
		"batch tokens=8192 run=0 wait=1 kv=0.01 cached=0 t=2026-08-23T09:09:50Z",
		"batch tokens=8192 run=0 wait=1 kv=0.02 cached=0 t=2026-08-23T09:09:51Z",
	},
	"sglang_prefill_batch_period_v0.4.6.log": {
		"batch tokens=2 run=28 wait=0 kv=0.26 cached=8027 t=2025-05-14T09:31:43Z",
		"batch tokens=4 run=30 wait=0 kv=0.3 cached=16030 t=2025-05-14T09:31:43Z",
		"batch tokens=5 run=34 wait=0 kv=0.34 cached=20050 t=2025-05-14T09:31:43Z",
	},
	"sglang_python_logging_style_wrapper.log": {
		"stat gen=126.29 span=317ms run=1 wait=0 kv=0 t=2026-06-07T10:59:31.659Z",
		"batch tokens=1 run=0 wait=0 kv=0 cached=7 t=2026-06-07T10:59:31.843Z",
		"stat gen=83.17 span=481ms run=1 wait=0 kv=0 t=2026-06-07T10:59:32.14Z",
	},
	"tgi_startup_lines.log": {},
	"tgi_success_span_chat_completions.log": {
		"request tokens=20 dur=734.172108ms user=27.2416 key=\"chat_completions\" t=2024-12-10T21:50:03.47801Z",
	},
	// A request's own ERROR line is its failure (the first escaped by
	// syslog); the batch loop's errors are no request's.
	"tgi_request_errors_issues.log": {
		"failed t=2024-04-07T02:20:36.58803Z",
		"failed t=2025-03-12T09:36:06.501161Z",
	},
	// --json-output: a request's refusal in its span (real), the
	// launcher's and router's start-up (real: none), and the generate
	// fixture's Success event in JSON, read as its text line is.
	"tgi_json_output.log": {
		"failed t=2024-10-25T22:35:49.174225Z",
		"request tokens=14 dur=610.405028ms user=22.9356 key=\"generate\" t=2024-02-14T06:49:51.437631Z",
	},
	"tgi_success_span_generate.log": {
		"request tokens=14 dur=610.405028ms user=22.9356 key=\"generate\" t=2024-02-14T06:49:51.437631Z",
	},
	// The line before num_scheduled_requests holds only the padded count:
	// skipped (padded), never read as tokens.
	"trtllm_iter_log_pr3914.log": {
		"request tokens=10 dur=5.060911ms user=197.593 run=10 iter=198 key=\"iterations\" t=2025-04-28T09:56:44Z",
	},
	"triton_trtllm_triton_verbose_iteration_stats.log": {
		"iteration run=1 iter=200 t=2023-11-20T02:29:01Z",
	},
	"vllm_v0_log_no_trailing_dot.log": {
		"stat gen=44.9 prompt=0 run=2 wait=3 kv=0.821 t=2026-02-28T21:48:18Z",
	},
	"vllm_v0_log_trailing_dot.log": {
		"stat gen=0 prompt=0 run=0 wait=0 kv=0 t=2026-08-22T20:52:46Z",
		"stat gen=41.7 prompt=0 run=1 wait=0 kv=0.02 t=2026-01-22T18:27:20Z",
		"stat gen=41.7 prompt=0 run=1 wait=0 kv=0.021 t=2026-01-22T18:27:25Z",
		"stat gen=41.5 prompt=0 run=1 wait=0 kv=0.021 t=2026-01-22T18:27:30Z",
		"stat gen=73.1 prompt=0 run=32 wait=0 kv=0.137 t=2026-06-25T03:06:35Z",
		"stat gen=73.4 prompt=0 run=32 wait=0 kv=0.139 t=2026-06-25T03:06:44Z",
	},
	"vllm_v1_log_apiserver_pid.log": {
		"stat gen=1055.3 prompt=0 run=18 wait=43 kv=0.959 key=\"engine 000\" t=2026-05-19T10:13:11Z",
		"stat gen=1226.3 prompt=0 run=18 wait=42 kv=0.955 key=\"engine 000\" t=2026-05-19T10:13:21Z",
		"stat gen=734.9 prompt=12068.8 run=18 wait=33 kv=0.877 key=\"engine 000\" t=2026-05-19T10:13:31Z",
		"stat gen=589.8 prompt=18032.5 run=21 wait=23 kv=0.959 key=\"engine 000\" t=2026-05-19T10:13:41Z",
		"stat gen=1242.7 prompt=0 run=20 wait=23 kv=0.984 key=\"engine 000\" t=2026-05-19T10:13:51Z",
	},
	"vllm_v1_log_docker_timestamp_prefix.log": {
		"stat gen=4.8 prompt=6335.3 run=9 wait=0 kv=0.628 key=\"engine 000\" t=2026-05-12T08:01:39.331095044Z",
		"stat gen=7.2 prompt=0 run=9 wait=1 kv=0.688 key=\"engine 000\" t=2026-05-12T08:01:49.332184394Z",
		"stat gen=5.7 prompt=3411.1 run=10 wait=0 kv=0.745 key=\"engine 000\" t=2026-05-12T08:01:59.333055436Z",
		"stat gen=7.2 prompt=0 run=10 wait=0 kv=0.799 key=\"engine 000\" t=2026-05-12T08:02:09.334253915Z",
	},
	"vllm_v1_log_engine_prefix.log": {
		"stat gen=29.2 prompt=1254.4 run=10 wait=4 kv=0.579 key=\"engine 000\" t=2026-06-16T10:03:14Z",
	},
	"vllm_v1_log_idle_then_active.log": {
		"stat gen=0 prompt=0 run=0 wait=0 kv=0 key=\"engine 000\" t=2026-12-25T13:32:40Z",
		"stat gen=93.1 prompt=3.9 run=1 wait=0 kv=0.001 key=\"engine 000\" t=2026-12-25T13:36:00Z",
		"stat gen=213 prompt=0 run=1 wait=0 kv=0.003 key=\"engine 000\" t=2026-12-25T13:36:10Z",
		"stat gen=206.3 prompt=0 run=1 wait=0 kv=0.004 key=\"engine 000\" t=2026-12-25T13:36:20Z",
	},
	"vllm_v1_log_loggers310.log": {
		"stat gen=1.2 prompt=0 run=1 wait=0 kv=0 key=\"engine 000\" t=2026-07-29T07:18:56Z",
		"stat gen=1.2 prompt=0 run=1 wait=0 kv=0 key=\"engine 000\" t=2026-07-29T07:19:06Z",
	},
	"vllm_v1_log_specdecode_interval_club3090_105.log": {
		"stat gen=74.7 prompt=2.5 run=1 wait=0 kv=0.074 key=\"engine 000\" t=2026-05-08T16:25:09Z",
		"spec drafted=1572 accepted=489 t=2026-05-08T16:25:09Z",
		"stat gen=72 prompt=0 run=1 wait=0 kv=0.078 key=\"engine 000\" t=2026-05-08T16:25:19Z",
		"spec drafted=1590 accepted=455 t=2026-05-08T16:25:19Z",
	},
	"vllm_v1_log_mm_cache_and_specdecode.log": {
		"stat gen=28.4 prompt=0 run=0 wait=0 kv=0 key=\"engine 000\" t=2026-05-08T16:21:55Z",
		"spec drafted=195 accepted=78 t=2026-05-08T16:21:55Z",
		"stat gen=0 prompt=0 run=0 wait=0 kv=0 key=\"engine 000\" t=2026-05-08T16:22:00Z",
	},
}

// TestTGIJSON: --json-output lines behind the prefixes a log picks up
// read as bare ones; errors outside a request's span, and a request
// span's other events, are no request's.
func TestTGIJSON(t *testing.T) {
	const (
		refused = `{"timestamp":"2024-10-25T22:35:49.174225Z","level":"ERROR","message":"too long","target":"text_generation_router::infer","filename":"router/src/infer/mod.rs","line_number":102,"span":{"name":"generate_stream"},"spans":[{"name":"vertex_compatibility"},{"name":"generate"},{"name":"generate_stream"}]}`
		success = `{"timestamp":"2024-12-10T21:50:03.47801Z","level":"INFO","message":"Success","target":"text_generation_router::server","span":{"inference_time":"734.172108ms","queue_time":"51.2µs","time_per_token":"36.708605ms","total_time":"735.9ms","validation_time":"1.1ms","name":"chat_completions"},"spans":[{"name":"chat_completions"}]}`
	)
	for _, tc := range []struct {
		name, line, want string
	}{
		{"bare", refused, "failed t=2024-10-25T22:35:49.174225Z"},
		{"journald", "Oct 25 22:35:49 gpu-3 text-generation-launcher[812]: " + refused, "failed t=2024-10-25T22:35:49.174225Z"},
		{"docker logs -t", "2024-12-10T21:50:03.478311012Z " + success, `request tokens=20 dur=734.172108ms user=27.2416 key="chat_completions" t=2024-12-10T21:50:03.478311012Z`},
		{"kubectl logs --prefix", "[pod/tgi-0/tgi] " + success, `request tokens=20 dur=734.172108ms user=27.2416 key="chat_completions" t=2024-12-10T21:50:03.47801Z`},
		{"the batch loop's error", `{"timestamp":"2025-05-26T10:46:35.221647Z","level":"ERROR","message":"Server error: Connection refused","target":"text_generation_router_v3::client","span":{"id":622,"size":1,"name":"prefill"},"spans":[{"batch_size":1,"name":"batch"},{"name":"prefill"},{"id":622,"size":1,"name":"prefill"}]}`, ""},
		{"an error outside any span", `{"timestamp":"2025-05-26T10:46:35Z","level":"ERROR","message":"Shard 0 failed","target":"text_generation_router::server"}`, ""},
		{"a request's debug output", `{"timestamp":"2024-12-10T21:50:03.47Z","level":"DEBUG","message":"Output: hi","target":"text_generation_router::server","span":{"name":"generate"},"spans":[{"name":"generate"}]}`, ""},
		{"a Success of another target", `{"timestamp":"2024-12-10T21:50:03.47Z","level":"INFO","message":"Success","target":"text_generation_launcher","span":{"inference_time":"1s","time_per_token":"10ms","name":"generate"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser("auto")
			if err != nil {
				t.Fatal(err)
			}
			p.Year, p.Timestamps = 2024, true
			r, ok := p.Parse([]byte(tc.line))
			got := ""
			if ok {
				got = format(r)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if p.Skipped != 0 {
				t.Errorf("skipped: %v", p.FirstSkip)
			}
		})
	}
}

func TestParseFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "fuzz") {
			continue
		}
		want, ok := wantRecords[name]
		if !ok {
			t.Errorf("%s: no expectation", name)
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			p, _ := NewParser("auto")
			p.Year, p.Timestamps = 2026, true
			var got []string
			sc := bufio.NewScanner(fh)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "# source:") {
					continue
				}
				if r, ok := p.Parse(sc.Bytes()); ok {
					got = append(got, format(r))
				}
			}
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("record %d:\n got %s\nwant %s", i, got[i], want[i])
				}
			}
		})
	}
	if seen != len(wantRecords) {
		t.Errorf("%d fixtures read, %d expected", seen, len(wantRecords))
	}
}
