// tpsmon_server_1h: the 1h rollup of tpsmon_server for InfluxDB 2.x/3.x, the same
// series as the 1.x continuous query of that name. Create with
// `influx task create --file tpsmon_server_1h.flux`; buckets "tpsmon" and "tpsmon_1h" must exist.
option task = {name: "tpsmon_server_1h", every: 1h, offset: 5m}

data = from(bucket: "tpsmon")
    |> range(start: -task.every)
    |> filter(fn: (r) => r._measurement == "tpsmon_server")

data
    |> filter(fn: (r) => r._field == "tokens" or r._field == "energy_j")
    |> aggregateWindow(every: 1h, fn: sum, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_server_1h")
    |> to(bucket: "tpsmon_1h")

data
    |> filter(fn: (r) => r._field == "system_tps" or r._field == "per_user_tps" or r._field == "running" or r._field == "waiting" or r._field == "gpu_util" or r._field == "sm_active" or r._field == "tps_per_gpu")
    |> aggregateWindow(every: 1h, fn: mean, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_server_1h")
    |> to(bucket: "tpsmon_1h")

data
    |> filter(fn: (r) => r._field == "coverage")
    |> aggregateWindow(every: 1h, fn: count, createEmpty: false)
    |> set(key: "_field", value: "windows")
    |> set(key: "_measurement", value: "tpsmon_server_1h")
    |> to(bucket: "tpsmon_1h")
