package rates

import "github.com/pgtask/pgtask/runtime"

type NoPeriod struct {
	runtime.Task `task:"no_period,rate=100"`
}

type ZeroRate struct {
	runtime.Task `task:"zero_rate,rate=0/1s"`
}

type TinyPeriod struct {
	runtime.Task `task:"tiny_period,rate=5/10us"`
}

type WordRate struct {
	runtime.Task `task:"word_rate,rate=many/1m"`
}

type ZeroBurst struct {
	runtime.Task `task:"zero_burst,rate=10/1s,burst=0"`
}

type BurstWithoutRate struct {
	runtime.Task `task:"burst_without_rate,burst=5"`
}

type KeyWithoutRate struct {
	runtime.Task `task:"key_without_rate"`
	Partner      string `task:"rate"`
}

type TwoRateKeys struct {
	runtime.Task `task:"two_rate_keys,rate=10/1s"`
	A            string `task:"rate"`
	B            string `task:"rate"`
}

type GroupAndRate struct {
	runtime.Task `task:"group_and_rate,rate=10/1s"`
	Account      int64 `task:"group"`
}

type LimitAndRate struct {
	runtime.Task `task:"limit_and_rate,limit=2,rate=10/1s"`
	Partner      string `task:"limit,rate"`
}
