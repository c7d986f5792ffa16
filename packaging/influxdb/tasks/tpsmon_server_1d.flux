// tpsmon_server_1d: the 1d rollup of tpsmon_server_1h for InfluxDB 2.x/3.x, the same
// series as the 1.x continuous query of that name. Create with
// `influx task create --file tpsmon_server_1d.flux`; buckets "tpsmon" and "tpsmon_1d" must exist.
option task = {name: "tpsmon_server_1d", every: 1d, offset: 5m}

data = from(bucket: "tpsmon_1h")
    |> range(start: -task.every)
    |> filter(fn: (r) => r._measurement == "tpsmon_server_1h")

data
    |> filter(fn: (r) => r._field == "tokens" or r._field == "energy_j" or r._field == "windows")
    |> aggregateWindow(every: 1d, fn: sum, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_server_1d")
    |> to(bucket: "tpsmon_1d")

data
    |> filter(fn: (r) => r._field == "system_tps" or r._field == "per_user_tps" or r._field == "running" or r._field == "gpu_util" or r._field == "tps_per_gpu")
    |> aggregateWindow(every: 1d, fn: mean, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_server_1d")
    |> to(bucket: "tpsmon_1d")
