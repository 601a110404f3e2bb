// Package abi holds version 1 of the botrun guest ABI: the names a module must
// export and may import, the status and error codes, and the JSON wire types
// that cross the boundary. SPEC.md beside this file is the written contract.
//
// abi imports only the standard library; it never imports host or durability.
package abi
