package limits

import "github.com/pgtask/pgtask/runtime"

type ZeroLimit struct {
	runtime.Task `task:"zero,limit=0"`
}

type NegativeLimit struct {
	runtime.Task `task:"negative,limit=-2"`
}

type BigLimit struct {
	runtime.Task `task:"big,limit=2147483648"`
}

type WordLimit struct {
	runtime.Task `task:"word,limit=many"`
}

type KeyWithoutLimit struct {
	runtime.Task `task:"key_without_limit"`
	Partner      string `task:"limit"`
}

type TwoKeys struct {
	runtime.Task `task:"two_keys,limit=2"`
	A            string `task:"limit"`
	B            string `task:"limit"`
}

type FloatKey struct {
	runtime.Task `task:"float_key,limit=2"`
	Score        float64 `task:"limit"`
}

type HiddenKey struct {
	runtime.Task `task:"hidden_key,limit=2"`
	partner      string `task:"limit"`
}

type GroupAndLimit struct {
	runtime.Task `task:"group_and_limit,limit=4"`
	Account      int64 `task:"group"`
}

type GroupAndLimitKey struct {
	runtime.Task `task:"group_and_limit_key,limit=4"`
	Account      int64  `task:"group"`
	Partner      string `task:"limit"`
}

type OneFieldBoth struct {
	runtime.Task `task:"one_field_both,limit=4"`
	Account      int64 `task:"group,limit"`
}

type LimitTwiceInATag struct {
	runtime.Task `task:"limit_twice,limit=4"`
	Partner      string `task:"limit,limit"`
}

type StrategyWithoutLimit struct {
	runtime.Task `task:"strategy_without_limit,on_limit=cancel_newest"`
}

type UnknownStrategy struct {
	runtime.Task `task:"unknown_strategy,limit=2,on_limit=drop"`
}
