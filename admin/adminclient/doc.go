// Package adminclient is the Go client of the admin API /admin/v1/
// (admin/adminhttp): what `sluice admin` and the tests of the status
// pages build on. Its errors are the admin.Service's: *admin.ConflictError
// for a stale version (409), *admin.InvalidError for a 400 with every
// error, errors wrapping admin.ErrNotFound and admin.ErrExists,
// *adminhttp.AuthError for 401 and 403, else *HTTPError.
//
//	c := adminclient.New("http://127.0.0.1:15000", adminclient.WithToken(tok))
//	cur, err := c.Config(ctx)
//	res, err := c.Update(ctx, admin.Domain("api", "small"),
//		map[string]any{"size": 20, "fill_rate": 2}, adminclient.WriteOptions{IfVersion: cur.Version})
package adminclient
