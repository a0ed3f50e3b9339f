package demo

import (
	"context"
	"fmt"
	"sync"
)

// memShop is the default database: two tables in this process's memory.
// Each statement is atomic, as in a database, and no more: a purchase's
// read and its write are separate statements with the race between them
// that act 1 shows; sellFenced is one transaction.
type memShop struct {
	mu       sync.Mutex
	products map[string]*memProduct
	orders   []memOrder // in the order they were recorded
}

type memProduct struct {
	stock int
	fence uint64
}

type memOrder struct {
	product  string
	instance int
	token    uint64
}

func newMemShop() *memShop { return &memShop{products: make(map[string]*memProduct)} }

func (s *memShop) kind() string { return "memory" }
func (s *memShop) where() string {
	return "(in this process; each read and write is atomic, as a statement)"
}

// connect returns a connection; the tables are shared, as in a database.
func (s *memShop) connect() (conn, error) { return memConn{s}, nil }

func (s *memShop) drop(context.Context) error { return nil }

func (s *memShop) addProduct(ctx context.Context, id string, stock int) error {
	return s.exec(ctx, func() error {
		if _, ok := s.products[id]; ok {
			return fmt.Errorf("demo: product %s exists", id)
		}
		s.products[id] = &memProduct{stock: stock}
		return nil
	})
}

func (s *memShop) outcome(ctx context.Context, product string) (outcome, error) {
	var o outcome
	err := s.exec(ctx, func() error {
		p, err := s.product(product)
		if err != nil {
			return err
		}
		o.stock, o.fence = p.stock, p.fence
		for _, ord := range s.orders {
			if ord.product == product {
				o.tokens = append(o.tokens, ord.token)
			}
		}
		return nil
	})
	return o, err
}

// exec runs one statement (or transaction) f, if ctx has not ended.
func (s *memShop) exec(ctx context.Context, f func() error) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

// product returns the row of id; s.mu is held.
func (s *memShop) product(id string) (*memProduct, error) {
	p, ok := s.products[id]
	if !ok {
		return nil, fmt.Errorf("demo: no product %s", id)
	}
	return p, nil
}

// memConn is an instance's connection to the memory shop.
type memConn struct{ s *memShop }

func (memConn) Close() error { return nil }

func (c memConn) readStock(ctx context.Context, product string) (int, error) {
	var stock int
	err := c.s.exec(ctx, func() error {
		p, err := c.s.product(product)
		if err == nil {
			stock = p.stock
		}
		return err
	})
	return stock, err
}

func (c memConn) sell(ctx context.Context, product string, newStock, instance int, token uint64) error {
	if err := c.s.exec(ctx, func() error {
		p, err := c.s.product(product)
		if err == nil {
			p.stock = newStock
		}
		return err
	}); err != nil {
		return err
	}
	return c.s.exec(ctx, func() error {
		c.s.orders = append(c.s.orders, memOrder{product: product, instance: instance, token: token})
		return nil
	})
}

func (c memConn) sellFenced(ctx context.Context, product string, newStock, instance int, token uint64) (bool, error) {
	var accepted bool
	err := c.s.exec(ctx, func() error {
		p, err := c.s.product(product)
		if err != nil || p.fence >= token {
			return err
		}
		p.stock, p.fence = newStock, token
		c.s.orders = append(c.s.orders, memOrder{product: product, instance: instance, token: token})
		accepted = true
		return nil
	})
	return accepted, err
}
