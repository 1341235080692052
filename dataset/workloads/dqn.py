"""DQN on CartPole as the originals ran it (IDs 42-49, TF-Agents' DQN tutorial): a Q-network of two dense layers
(100, 50), one environment step collected per training step into a replay buffer, a batch sampled from it, and a
target network. CartPole-v0 is written here in numpy (gym's physics, Euler integration at 50 Hz, 200 steps at
most), since gym is not a dependency. The replay buffer lives in the training process, so DQN loads in-process
(workers are ignored); a DataLoader still hands out the batches, one per step, so they count as steps."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .common import Run, autocast

GAMMA, EPSILON, TARGET_EVERY, INITIAL_COLLECT, CAPACITY = 0.99, 0.1, 100, 100, 100_000


class CartPole:
    """gym's CartPole-v0: push the cart left (0) or right (1); reward 1 per step until the pole passes 12 degrees,
    the cart leaves +-2.4, or 200 steps."""

    GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    THETA_LIMIT, X_LIMIT, MAX_STEPS = 12 * 2 * math.pi / 360, 2.4, 200

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.reset()

    def reset(self) -> np.ndarray:
        self.state, self.steps = self.rng.uniform(-0.05, 0.05, 4), 0
        return self.state.astype(np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        x, x_dot, theta, theta_dot = self.state
        force = self.FORCE if action == 1 else -self.FORCE
        total, pole_moment = self.CART_MASS + self.POLE_MASS, self.POLE_MASS * self.HALF_LENGTH
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + pole_moment * theta_dot**2 * sin) / total
        theta_acc = (self.GRAVITY * sin - cos * temp) / (self.HALF_LENGTH * (4 / 3 - self.POLE_MASS * cos**2 / total))
        x_acc = temp - pole_moment * theta_acc * cos / total
        self.state = np.array(
            [
                x + self.TAU * x_dot,
                x_dot + self.TAU * x_acc,
                theta + self.TAU * theta_dot,
                theta_dot + self.TAU * theta_acc,
            ]
        )
        self.steps += 1
        fallen = abs(self.state[0]) > self.X_LIMIT or abs(self.state[2]) > self.THETA_LIMIT
        return self.state.astype(np.float32), 1.0, bool(fallen or self.steps >= self.MAX_STEPS)


class Replay(Dataset):
    """A ring buffer of transitions; item i is a batch sampled from it (the DataLoader adds no batching)."""

    def __init__(self, steps: int, batch_size: int, rng: np.random.Generator):
        self.steps, self.batch_size, self.rng = steps, batch_size, rng
        self.states = np.zeros((CAPACITY, 4), np.float32)
        self.next_states = np.zeros((CAPACITY, 4), np.float32)
        self.actions = np.zeros(CAPACITY, np.int64)
        self.rewards = np.zeros(CAPACITY, np.float32)
        self.done = np.zeros(CAPACITY, np.float32)
        self.size = self.position = 0

    def add(self, state, action, reward, next_state, done) -> None:
        i = self.position
        self.states[i], self.actions[i], self.rewards[i], self.next_states[i], self.done[i] = (
            state,
            action,
            reward,
            next_state,
            done,
        )
        self.position, self.size = (i + 1) % CAPACITY, min(self.size + 1, CAPACITY)

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int):
        j = self.rng.integers(0, self.size, self.batch_size)
        return tuple(
            torch.from_numpy(a[j]) for a in (self.states, self.actions, self.rewards, self.next_states, self.done)
        )


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 100), nn.ReLU(), nn.Linear(100, 50), nn.ReLU(), nn.Linear(50, 2))


class Agent:
    def __init__(self, settings: Run, rng: np.random.Generator):
        self.settings, self.rng = settings, rng
        self.q, self.target = q_network().to(settings.device), q_network().to(settings.device)
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=1e-3)

    def act(self, state: np.ndarray) -> int:
        if self.rng.random() < EPSILON:
            return int(self.rng.integers(0, 2))
        with torch.no_grad():
            return int(self.q(torch.from_numpy(state).to(self.settings.device)).argmax())

    def learn(self, batch) -> None:
        states, actions, rewards, next_states, done = (t.to(self.settings.device) for t in batch)
        with torch.no_grad():
            targets = rewards + GAMMA * (1 - done) * self.target(next_states).max(1).values
        with autocast(self.settings):
            predicted = self.q(states).gather(1, actions[:, None])[:, 0]
            loss = F.mse_loss(predicted.float(), targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


def run(settings: Run) -> int:
    rng = np.random.default_rng(settings.seed)
    env, replay, agent = CartPole(rng), Replay(settings.steps, settings.batch_size, rng), Agent(settings, rng)
    state = env.reset()

    def collect() -> None:
        nonlocal state
        action = agent.act(state)
        next_state, reward, done = env.step(action)
        replay.add(state, action, reward, next_state, done)
        state = env.reset() if done else next_state

    for _ in range(INITIAL_COLLECT):
        collect()
    steps = 0
    for batch in DataLoader(replay, batch_size=None, num_workers=0):
        agent.learn(batch)
        collect()
        steps += 1
        if steps % TARGET_EVERY == 0:
            agent.target.load_state_dict(agent.q.state_dict())
    return steps


MODELS = ("dqn",)
