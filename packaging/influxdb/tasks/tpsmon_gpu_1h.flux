// tpsmon_gpu_1h: the 1h rollup of tpsmon_gpu for InfluxDB 2.x/3.x, the same
// series as the 1.x continuous query of that name. Create with
// `influx task create --file tpsmon_gpu_1h.flux`; buckets "tpsmon" and "tpsmon_1h" must exist.
option task = {name: "tpsmon_gpu_1h", every: 1h, offset: 5m}

data = from(bucket: "tpsmon")
    |> range(start: -task.every)
    |> filter(fn: (r) => r._measurement == "tpsmon_gpu")

data
    |> filter(fn: (r) => r._field == "util" or r._field == "sm_active" or r._field == "power_w")
    |> aggregateWindow(every: 1h, fn: mean, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1h")
    |> to(bucket: "tpsmon_1h")

data
    |> filter(fn: (r) => r._field == "util_max")
    |> aggregateWindow(every: 1h, fn: max, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1h")
    |> to(bucket: "tpsmon_1h")

data
    |> filter(fn: (r) => r._field == "energy_j")
    |> aggregateWindow(every: 1h, fn: sum, createEmpty: false)
    |> set(key: "_measurement", value: "tpsmon_gpu_1h")
    |> to(bucket: "tpsmon_1h")
