package group

import (
	"time"

	"github.com/pgtask/pgtask/runtime"
)

type TwoGroups struct {
	runtime.Task
	A string `task:"group"`
	B string `task:"group"`
}

type FloatGroup struct {
	runtime.Task
	Score float64 `task:"group"`
}

type PointerGroup struct {
	runtime.Task
	ID *int64 `task:"group"`
}

type TimeGroup struct {
	runtime.Task
	At time.Time `task:"group"`
}

type HiddenGroup struct {
	runtime.Task
	key string `task:"group"`
}

type WrongFieldTag struct {
	runtime.Task
	Queue string `task:"queue=x"`
}

type ChanUnique struct {
	runtime.Task
	Updates chan int `task:"unique"`
}

type UniqueTwice struct {
	runtime.Task `task:"unique_twice,unique=payload"`
	Account      string `task:"unique"`
}

type GroupTwiceInATag struct {
	runtime.Task
	Account string `task:"group,group"`
}

type ArrayKeyUnique struct {
	runtime.Task
	Counts map[[2]int]string `task:"unique"`
}
