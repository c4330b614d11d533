package fair

import "github.com/pgtask/pgtask/runtime"

type Shared struct {
	runtime.Task `task:"shared,queue=q"`
	Tenant       string `task:"tenant"`
}

type Unsaid struct {
	runtime.Task `task:"unsaid,queue=q"`
}

type FairOff struct {
	runtime.Task `task:"fair_off,queue=r,fair=off"`
}

type FloatTenant struct {
	runtime.Task `task:"float_tenant,queue=s"`
	Score        float64 `task:"tenant"`
}

type TwoTenants struct {
	runtime.Task `task:"two_tenants,queue=s"`
	A            string `task:"tenant"`
	B            string `task:"tenant"`
}

type TenantTwiceInATag struct {
	runtime.Task `task:"tenant_twice,queue=s"`
	A            string `task:"tenant,tenant"`
}
