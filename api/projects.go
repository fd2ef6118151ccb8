package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

// MaxMemoryBytes bounds an entry a person adds to a project's memory.
const MaxMemoryBytes = 8 << 10

type projectRequest struct {
	Slug string `json:"slug"`
	Name string `json:"name"`
}

func (s *Server) createProject(c *fiber.Ctx) error {
	var req projectRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	if !store.SlugPattern.MatchString(req.Slug) {
		return badRequest("slug", "slug %.80q must be 1-63 lowercase letters, digits or -, starting with a letter or digit", req.Slug)
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" {
		req.Name = req.Slug
	}
	if len(req.Name) > 200 {
		return badRequest("name", "name is over 200 bytes")
	}
	p, err := s.d.Store.CreateProject(c.UserContext(), store.Project{Slug: req.Slug, Name: req.Name, Owner: principal(c)})
	if errors.Is(err, store.ErrProjectExists) {
		return &Error{Status: http.StatusConflict, Field: "slug", Message: fmt.Sprintf("project %q exists", req.Slug)}
	}
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(p)
}

func (s *Server) listProjects(c *fiber.Ctx) error {
	owner := principal(c)
	if seesAllRuns(c) {
		owner = ""
	}
	ps, err := s.d.Store.ListProjects(c.UserContext(), owner, 500)
	if err != nil {
		return err
	}
	return c.JSON(projectList{Projects: ps})
}

type projectList struct {
	Projects []store.Project `json:"projects"`
}

// projectAccess is the caller as the one ownership check of projects
// (store.ProjectAccess, which the MCP server uses too) sees it.
func projectAccess(c *fiber.Ctx) store.ProjectAccess {
	return store.ProjectAccess{Principal: principal(c), ReadAll: seesAllRuns(c), Admin: hasRole(c, RoleAdmin)}
}

// projectFor loads the project of the route for the caller: its owner, or a
// reader of everything (read_all, admin). Another principal's project is a 404,
// like a missing one, so slugs cannot be probed.
func (s *Server) projectFor(c *fiber.Ctx, slug string) (store.Project, error) {
	if !store.SlugPattern.MatchString(slug) {
		return store.Project{}, badRequest("slug", "slug %.80q is not a project slug", slug)
	}
	p, err := s.d.Store.GetProject(c.UserContext(), slug)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !projectAccess(c).MaySee(p)) {
		return store.Project{}, &Error{Status: http.StatusNotFound, Field: "project", Message: fmt.Sprintf("no project %q", slug)}
	}
	return p, err
}

// ownProject is projectFor for changes: only the owner (or an admin) changes a
// project; a reader of everything sees it but gets 403.
func (s *Server) ownProject(c *fiber.Ctx, slug string) (store.Project, error) {
	p, err := s.projectFor(c, slug)
	if err != nil {
		return p, err
	}
	if !projectAccess(c).MayUse(p) {
		return p, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("project %q belongs to %s", slug, p.Owner)}
	}
	return p, nil
}

func (s *Server) getProject(c *fiber.Ctx) error {
	p, err := s.projectFor(c, c.Params("slug"))
	if err != nil {
		return err
	}
	return c.JSON(p)
}

// deleteProject removes a project: its memory, its knowledge and its workspace.
// The slug must be repeated in ?confirm= — deleting loses work no run can redo.
func (s *Server) deleteProject(c *fiber.Ctx) error {
	p, err := s.ownProject(c, c.Params("slug"))
	if err != nil {
		return err
	}
	if c.Query("confirm") != p.Slug {
		return badRequest("confirm", "deleting project %q removes its workspace, knowledge and memory: repeat its slug in ?confirm=%s", p.Slug, p.Slug)
	}
	ctx := c.UserContext()
	switch err := s.d.Store.DeleteProject(ctx, p, principal(c)); {
	case errors.Is(err, store.ErrProjectBusy):
		return &Error{Status: http.StatusConflict, Message: err.Error() + "; cancel them or wait for them to end"}
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Field: "project", Message: fmt.Sprintf("no project %q", p.Slug)}
	case err != nil:
		return err
	}
	if s.d.RemoveProject != nil {
		if err := s.d.RemoveProject(ctx, p); err != nil {
			// The project is gone; what is left on disk or in the index is named
			// so an operator can remove it.
			s.d.Log.Error("project deleted, but its workspace or knowledge was not removed", "project", p.Slug, "err", err)
			return &Error{Status: http.StatusInternalServerError, Message: fmt.Sprintf("project %q deleted, but removing its files failed: %v", p.Slug, err)}
		}
	}
	s.d.Log.Info("project deleted", "project", p.Slug, "project_id", p.ID, "owner", p.Owner, "by", principal(c))
	return c.SendStatus(http.StatusNoContent)
}

type memoryRequest struct {
	Content string `json:"content"`
	// Agent, when set, makes the entry that agent's own (scope agent).
	Agent string `json:"agent"`
}

func (s *Server) addMemory(c *fiber.Ctx) error {
	p, err := s.ownProject(c, c.Params("slug"))
	if err != nil {
		return err
	}
	var req memoryRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	req.Content = strings.TrimSpace(req.Content)
	if req.Content == "" {
		return badRequest("content", "content is required")
	}
	if len(req.Content) > MaxMemoryBytes {
		return badRequest("content", "content is over %d bytes", MaxMemoryBytes)
	}
	scope := "project"
	if req.Agent != "" {
		if len(req.Agent) > 64 || strings.ContainsFunc(req.Agent, func(r rune) bool {
			return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) {
			return badRequest("agent", "agent %.80q must be letters, digits, - or _ (max 64)", req.Agent)
		}
		scope = "agent"
	}
	e, err := s.d.Store.AddMemory(c.UserContext(), store.MemoryEntry{Project: p.ID, Tier: store.MemoryLongTerm, Scope: scope,
		Agent: req.Agent, Author: principal(c), Content: req.Content})
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(e)
}

func (s *Server) listMemory(c *fiber.Ctx) error {
	p, err := s.projectFor(c, c.Params("slug"))
	if err != nil {
		return err
	}
	es, err := s.d.Store.ListMemory(c.UserContext(), p.ID, 1000)
	if err != nil {
		return err
	}
	return c.JSON(memoryList{Memory: es})
}

type memoryList struct {
	Memory []store.MemoryEntry `json:"memory"`
}

func (s *Server) deleteMemory(c *fiber.Ctx) error {
	p, err := s.ownProject(c, c.Params("slug"))
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.Params("id"), 10, 64)
	if err != nil || id <= 0 {
		return badRequest("id", "memory id %.40q is not a positive integer", c.Params("id"))
	}
	if err := s.d.Store.DeleteMemory(c.UserContext(), p, id, principal(c)); errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("project %q has no memory %d", p.Slug, id)}
	} else if err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}
