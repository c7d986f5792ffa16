// tpsmon_gpu_1d: the 1d rollup of tpsmon_gpu_1h for InfluxDB 2.x/3.x, the same
// series as the 1.x continuous query of that name. Create with
// `influx task create --file tpsmon_gpu_1d.flux`; buckets "tpsmon" and "tpsmon_1d" must exist.
option task = {name: "tpsmon_gpu_1d", every: 1d, offset: 5m}

data = from(bucket: "tpsmon_1h")
    |> range(start: -task.every)
    |> filter(fn: (r) => r._measurement == "tpsmon_gpu_1h")

data
    |> filter(fn: (r) => r._field == "util")
    |> aggregateWindow(every: 1d, fn: mean, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1d")
    |> to(bucket: "tpsmon_1d")

data
    |> filter(fn: (r) => r._field == "util_max")
    |> aggregateWindow(every: 1d, fn: max, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1d")
    |> to(bucket: "tpsmon_1d")

data
    |> filter(fn: (r) => r._field == "energy_j" or r._field == "windows")
    |> aggregateWindow(every: 1d, fn: sum, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1d")
    |> to(bucket: "tpsmon_1d")
