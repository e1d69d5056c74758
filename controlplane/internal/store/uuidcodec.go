package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidCodec lets pgx move google/uuid values as the 16 bytes they are.
// Without it, pgx sees uuid.UUID and uuid.NullUUID only as driver.Valuer and
// sql.Scanner: every id is formatted to text, parsed back by the codec and,
// on the way out, formatted and parsed again, through reflection for
// arrays: a large share of the server's work when statements pass and
// return hundreds of ids each.
type uuidCodec struct{ pgtype.UUIDCodec }

// registerUUIDCodec replaces the uuid and uuid[] types of a connection's
// type map (pgx.ConnConfig.AfterConnect).
func registerUUIDCodec(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(t)
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
	// Where a parameter's type is not known (the simple protocol), the Go
	// type names it.
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType(uuid.NullUUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
	return nil
}

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	switch value.(type) {
	case uuid.UUID, uuid.NullUUID:
		return encodeUUID{format: format}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	switch target.(type) {
	case *uuid.UUID, *uuid.NullUUID:
		return scanUUID{format: format}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodeUUID struct{ format int16 }

func (p encodeUUID) Encode(value any, buf []byte) ([]byte, error) {
	var u uuid.UUID
	switch v := value.(type) {
	case uuid.UUID:
		u = v
	case uuid.NullUUID:
		if !v.Valid {
			return nil, nil // NULL
		}
		u = v.UUID
	default:
		return nil, fmt.Errorf("uuid: cannot encode %T", value)
	}
	if p.format == pgtype.BinaryFormatCode {
		return append(buf, u[:]...), nil
	}
	return append(buf, u.String()...), nil
}

type scanUUID struct{ format int16 }

func (p scanUUID) Scan(src []byte, target any) error {
	var u uuid.UUID
	valid := src != nil
	if valid {
		switch {
		case p.format == pgtype.BinaryFormatCode && len(src) == 16:
			u = uuid.UUID(src)
		case p.format == pgtype.BinaryFormatCode:
			return fmt.Errorf("uuid: %d bytes, not 16", len(src))
		default:
			var err error
			if u, err = uuid.ParseBytes(src); err != nil {
				return err
			}
		}
	}
	switch t := target.(type) {
	case *uuid.UUID:
		if !valid {
			return fmt.Errorf("uuid: cannot scan NULL into %T", target)
		}
		*t = u
	case *uuid.NullUUID:
		*t = uuid.NullUUID{UUID: u, Valid: valid}
	default:
		return fmt.Errorf("uuid: cannot scan into %T", target)
	}
	return nil
}
